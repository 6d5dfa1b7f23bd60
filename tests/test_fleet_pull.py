"""benchmarks/fleet_pull.py's targets: the pages its server gives Prometheus are a pulled rank's,
each with its own labels, moving every round, and its file_sd file lists one target per rank."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.fleet_pull import RankPages, TargetServer, file_sd_groups, pull_job, write_file_sd
from benchmarks.fleet_shards import shard_of, shard_scrape
from trial_instrumentation import names


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def test_each_rank_serves_a_pulled_trials_page_with_its_own_labels_and_moving_counters() -> None:
    # Rank 19 of 20: past the 16 templates (its figures are template 3's, its labels its own),
    # the fourth rank of the third trial, on the third node.
    pages = RankPages(20, None)
    body = pages.body(19)
    assert body is not None and b"@" not in body
    found = samples(body)
    key = {"experiment": "fleet", "trial": "t2", "rank": "3"}
    steps = found[(f"{names.STEPS}_total", tuple(sorted(key.items())))]
    assert steps > 0
    info = [labels for name, labels in found if name == names.TRIAL_INFO]
    assert [dict(labels) for labels in info] == [{**key, "nodename": "node2", "pid": "1019",
                                                  "world_size": "8"}]
    phases = {dict(labels)["phase"] for name, labels in found
              if name == f"{names.PHASE_SECONDS}_bucket"}
    assert phases == set(names.STANDARD_PHASES)
    # Phase buckets None: the step histogram's bounds (not the +Inf alone of `none`).
    les = {name.removesuffix("_bucket"): {dict(labels)["le"] for n, labels in found
                                           if n == name}
           for name in (f"{names.PHASE_SECONDS}_bucket", f"{names.STEP_SECONDS}_bucket")}
    assert les[names.PHASE_SECONDS] == les[names.STEP_SECONDS], les
    assert len(les[names.STEP_SECONDS]) == len(names.DEFAULT_BUCKETS) + 1, les
    assert {dict(labels)["rank"] for name, labels in found} == {"3"}
    assert pages.page(b"/rank/19/metrics") == body
    assert pages.page(b"/rank/20/metrics") is None and pages.page(b"/metrics") is None
    pages.refresh()
    moved = samples(pages.body(19) or b"")
    assert moved[(f"{names.STEPS}_total", tuple(sorted(key.items())))] > steps


def test_none_buckets_serve_the_phases_sums_and_counts_only() -> None:
    body = RankPages(8, ()).body(0) or b""
    les = {dict(labels).get("le") for name, labels in samples(body)
           if name == f"{names.PHASE_SECONDS}_bucket"}
    assert les == {"+Inf"}


def test_the_server_answers_every_rank_on_one_kept_alive_connection() -> None:
    with TargetServer(RankPages(24, None)) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            for index, trial, rank in ((0, "t0", "0"), (19, "t2", "3")):
                conn.request("GET", f"/rank/{index}/metrics")
                resp = conn.getresponse()
                body = resp.read()
                assert resp.status == 200, body
                assert body == server.pages.body(index)  # that rank's page, whole
                assert f'trial="{trial}"'.encode() in body and f'rank="{rank}"'.encode() in body
            conn.request("GET", "/rank/24/metrics")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 404
        finally:
            conn.close()
        assert server.served == 2  # the two pages, not the 404


def test_file_sd_lists_one_target_per_rank_with_its_path_and_a_unique_instance(
        tmp_path: Path) -> None:
    sd = tmp_path / "ranks.json"
    write_file_sd(sd, file_sd_groups(9100, 16))
    groups = json.loads(sd.read_text())
    assert len(groups) == 16 and not list(tmp_path.glob("*.tmp"))
    assert {g["targets"][0] for g in groups} == {"127.0.0.1:9100"}
    # Rank 11: the fourth rank of the second trial (not the second of the fourth).
    labels = groups[11]["labels"]
    assert {k: v for k, v in labels.items() if not k.startswith("__meta_")} == {
        "__metrics_path__": "/rank/11/metrics", "instance": "127.0.0.1:9100/rank/11",
        "namespace": "fleet", "pod": "t1-rank3"}
    assert labels["__meta_kubernetes_pod_annotation_trainwatch_io_trial"] == "t1"
    assert labels["__meta_kubernetes_pod_annotation_trainwatch_io_port"] == "9100"
    assert len({g["labels"]["instance"] for g in groups}) == 16
    job = pull_job(sd)
    assert job["job_name"] == names.JOB and job["honor_labels"] is True
    assert job["file_sd_configs"] == [{"files": [str(sd)]}]



def test_each_shards_job_is_the_charts_pull_job_on_file_sd_keeping_its_share(
        tmp_path: Path) -> None:
    """The chart's shard jobs as the sharded run uses them: discovery from the file, its own
    hashmod keep. (That shard_of predicts Prometheus's hashmod: tests/test_sharding_live.py.)"""
    sd = tmp_path / "ranks.json"
    jobs, writes = shard_scrape(3, sd, "http://127.0.0.1:9", interval=10.0)
    assert len(jobs) == len(writes) == 3
    for k, job in enumerate(jobs):
        assert job["job_name"] == names.JOB and job["honor_labels"] is True
        assert job["file_sd_configs"] == [{"files": [str(sd)]}]
        assert "kubernetes_sd_configs" not in job and job["scrape_interval"] == "10s"
        hashmod, keep = job["relabel_configs"][-3:-1]
        assert (hashmod["action"], hashmod["modulus"], keep["regex"]) == ("hashmod", 3, str(k))
        assert writes[k]["url"] == "http://127.0.0.1:9/api/v1/write"
    spread = [shard_of("fleet", f"t{t}", 3) for t in range(300)]
    assert {spread.count(k) for k in range(3)} <= set(range(70, 131)), spread
