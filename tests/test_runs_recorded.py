"""`find_runs` over recorded series: runs backfilled into a real Prometheus (promtool
create-blocks-from openmetrics), so each run's exact first and last sample, its start, last push
and exit reason are known, and the edges of the range are where the tests put them (~3 s)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.stack import Prometheus, free_port, promtool, start_prometheus
from tests.loopback import scripted_server
from trainwatch.diagnose.runs import (
    DEFAULT_RETENTION,
    ENDED_CLEAN,
    FAILED,
    RUNNING,
    STALE,
    Run,
    find_runs,
    latest_per_rank,
    resolution,
    retention,
)
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trial_instrumentation import names

# The first run's first sample, on a multiple of the wide range's 15 s buckets, so where the
# range begins within its first bucket is known (see EDGE).
BASE = (int(time.time()) - 2 * 3600) // 15 * 15
WIDE = 8 * 3600 + 15  # a range read at a 15 s resolution (over RESOLUTION_POINTS)
WIDE_NOW = BASE + 385.25  # 5 s after the restarted run's last sample: inside the last bucket
# Where the wide range begins (to the second): 10.25 s past a bucket boundary, so its first
# bucket ends 4.75 s in and holds the "edge" run's first sample (3 s in).
EDGE = BASE + 385 - WIDE


def _run(trial: str, rank: str, pid: str, times: list[float], started: float,
         exit_reason: str | None = None, experiment: str = "e",
         nodename: str = "n1") -> list[tuple[str, float, int]]:
    """(series, value, time) samples of one run as Prometheus scrapes its Pushgateway group:
    its info (with pid), its start time, push_time_seconds one second before each scrape and,
    in its final push only, the exit marker."""
    key = f'experiment="{experiment}",trial="{trial}",rank="{rank}"'
    out = []
    for t in times:
        out.append((f'{names.TRIAL_INFO}{{{key},pid="{pid}",nodename="{nodename}",world_size="2"}}',
                    1, t))
        out.append((f"{names.START_TIME}{{{key}}}", started, t))
        out.append((f"push_time_seconds{{{key}}}", t - 1, t))
    if exit_reason is not None:
        out.append((f'{names.EXIT}{{{key},reason="{exit_reason}"}}', 1, times[-1]))
    return out


RUNS = [
    # e/t rank 0: a clean run, then (30 s later) a restart that is still pushing
    *_run("t", "0", "100", list(range(BASE, BASE + 41, 5)), BASE - 2, names.EXIT_CLEAN),
    *_run("t", "0", "200", list(range(BASE + 70, BASE + 381, 5)), BASE + 69),
    # e/t rank 1: a run that failed
    *_run("t", "1", "300", list(range(BASE, BASE + 96, 5)), BASE - 1, names.EXIT_FAILED),
    # a run of one push, between two of the wide range's 15 s buckets
    *_run("short", "0", "400", [BASE + 123], BASE + 120, names.EXIT_CLEAN),
    # two runs at the start of the wide range: one just inside it, one just before it
    *_run("edge", "0", "500", [EDGE + 3, EDGE + 8], EDGE + 1, names.EXIT_CLEAN),
    *_run("before", "0", "600", [EDGE - 60, EDGE - 45, EDGE - 30], EDGE - 61, names.EXIT_CLEAN),
    # experiment q: a run that failed and its restart 2 s later, both in one 15 s bucket of the
    # wide range, (BASE + 195, BASE + 210]
    *_run("t", "0", "700", [BASE + 200, BASE + 205], BASE + 199, names.EXIT_FAILED, "q"),
    *_run("t", "0", "800", [BASE + 207, BASE + 209], BASE + 206, experiment="q"),
    # experiment m: samples off the whole second, its last 501 ms into its last 1 s bucket
    *_run("t", "0", "900", [BASE + 250.5, BASE + 251.0, BASE + 251.501], BASE + 249, experiment="m"),
    # experiment c: a container's process (pid 1) that failed on one node and its restart, pid
    # 1 again, on another node
    *_run("t", "0", "1", [BASE + 300, BASE + 305, BASE + 310], BASE + 299, names.EXIT_FAILED,
          "c", nodename="n1"),
    *_run("t", "0", "1", [BASE + 330, BASE + 335], BASE + 329, experiment="c", nodename="n2"),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusAPI]:
    workdir = tmp_path_factory.mktemp("runs")
    by_series: dict[str, list[str]] = {}
    for series, value, t in RUNS:  # OpenMetrics wants each series' samples together, in order
        by_series.setdefault(series, []).append(f"{series} {value} {t}")
    source = workdir / "runs.om"
    source.write_text("\n".join([*(line for lines in by_series.values() for line in lines),
                                 "# EOF"]) + "\n")
    promtool("tsdb", "create-blocks-from", "openmetrics", source, workdir / "tsdb")
    prom: Prometheus
    with start_prometheus(workdir, {"global": {"scrape_interval": "1m"}},
                          "--storage.tsdb.retention.time=30d") as prom:
        yield PrometheusAPI(prom.url)


def _edges(runs: list[Run]) -> dict[str, tuple[float, float]]:
    return {run.pid: (run.first, run.last) for run in runs}


def test_each_run_in_the_range_is_found_with_its_exact_first_and_last_sample(
        api: PrometheusAPI) -> None:
    runs = find_runs(api, 600, experiment="e", now=BASE + 400.25)
    assert _edges(runs) == {"100": (BASE, BASE + 40), "200": (BASE + 70, BASE + 380),
                            "300": (BASE, BASE + 95), "400": (BASE + 123, BASE + 123)}
    # Oldest first per rank, ranks in order: a restart is a second run of the same rank.
    assert [(r.trial, r.rank, r.pid) for r in runs] == [
        ("short", "0", "400"), ("t", "0", "100"), ("t", "0", "200"), ("t", "1", "300")]


def test_a_run_is_read_at_its_last_sample_its_start_last_push_and_exit(api: PrometheusAPI) -> None:
    runs = {r.pid: r for r in find_runs(api, 600, experiment="e", trial="t", now=BASE + 400.25)}
    assert set(runs) == {"100", "200", "300"}
    clean, restarted, failed = runs["100"], runs["200"], runs["300"]
    assert (clean.started, clean.pushed, clean.exit_reason) == (BASE - 2, BASE + 39, "clean")
    assert (clean.start, clean.end, clean.seconds) == (BASE - 2, BASE + 39, 41)
    assert (restarted.started, restarted.pushed, restarted.exit_reason) == (
        BASE + 69, BASE + 379, None)
    assert (failed.exit_reason, failed.world_size, failed.nodename) == ("failed", "2", "n1")
    # Only the restart is still scraped at `now` (the others' last samples are over 5 m old).
    assert {pid for pid, r in runs.items() if r.current} == {"200"}
    assert [r.state(60, now=BASE + 400.25) for r in (clean, restarted, failed)] == [
        ENDED_CLEAN, RUNNING, FAILED]
    assert restarted.state(20, now=BASE + 400.25) == STALE  # its last push 21 s before now


@pytest.mark.parametrize("since", [600, WIDE])
def test_a_restart_within_one_bucket_does_not_take_the_exit_of_the_run_before(
        api: PrometheusAPI, since: int) -> None:
    runs = {r.pid: r for r in find_runs(api, since, experiment="q", now=BASE + 212.25)}
    failed, restart = runs["700"], runs["800"]
    assert (failed.first, failed.last, failed.exit_reason) == (BASE + 200, BASE + 205, "failed")
    assert (failed.started, failed.pushed) == (BASE + 199, BASE + 204)
    assert (restart.first, restart.last, restart.exit_reason) == (BASE + 207, BASE + 209, None)
    assert (restart.started, restart.pushed) == (BASE + 206, BASE + 208)


def test_selectors_narrow_the_runs_to_a_trial_and_a_rank(api: PrometheusAPI) -> None:
    assert [r.pid for r in find_runs(api, 600, experiment="e", trial="t", rank="1",
                                     now=BASE + 400.25)] == ["300"]
    assert find_runs(api, 600, experiment="other", now=BASE + 400.25) == []


def test_a_wide_range_finds_a_one_push_run_and_exact_edges_at_both_ends(
        api: PrometheusAPI) -> None:
    runs = find_runs(api, WIDE, experiment="e", now=WIDE_NOW)
    edges = _edges(runs)
    # The restart's last sample, 5 s before now, is in the last 15 s bucket.
    assert edges["200"] == (BASE + 70, BASE + 380)
    assert edges["400"] == (BASE + 123, BASE + 123)
    one = next(r for r in runs if r.pid == "400")  # its one sample is its first and its last
    assert (one.started, one.pushed, one.exit_reason) == (BASE + 120, BASE + 122, "clean")
    # A run in the range's first seconds is in; one that ended 30 s before the range is out.
    assert edges["500"] == (EDGE + 3, EDGE + 8)
    assert "600" not in edges
    assert sorted(edges) == ["100", "200", "300", "400", "500"]


def test_the_range_ends_at_now(api: PrometheusAPI) -> None:
    """Runs that start after `now` are not there yet; one that ended is there at its end."""
    runs = find_runs(api, 600, experiment="e", trial="t", now=BASE + 50.25)
    assert _edges(runs) == {"100": (BASE, BASE + 40), "300": (BASE, BASE + 50)}


def test_latest_per_rank_picks_the_run_on_at_an_instant(api: PrometheusAPI) -> None:
    runs = find_runs(api, 600, experiment="e", trial="t", now=BASE + 400.25)
    assert [r.pid for r in latest_per_rank(runs)] == ["200", "300"]
    assert [r.pid for r in latest_per_rank(runs, at=BASE + 60)] == ["100", "300"]
    assert [r.pid for r in latest_per_rank(runs, at=BASE + 70)] == ["200", "300"]


def test_retention_is_read_from_prometheus_and_defaults_to_its_15_days(
        api: PrometheusAPI) -> None:
    assert retention(api) == 30 * 86400
    assert DEFAULT_RETENTION == 15 * 86400
    nobody = PrometheusAPI(f"http://127.0.0.1:{free_port()}", timeout=2)
    assert retention(nobody) == 15 * 86400


class _Answers:
    """What status/runtimeinfo says: the one call `retention` makes."""

    def __init__(self, retention: str) -> None:
        self.info = {"storageRetention": retention}

    def get(self, path: str) -> dict[str, str]:
        assert path == "status/runtimeinfo"
        return self.info


@pytest.mark.parametrize(("said", "seconds"), [
    ("30d", 30 * 86400), ("7d or 10GiB", 7 * 86400),  # a size bound too: the time comes first
    ("10GiB", DEFAULT_RETENTION), ("", DEFAULT_RETENTION),  # only a size; nothing
    ("500ms", 0.5), ("0s", DEFAULT_RETENTION), ("-0", DEFAULT_RETENTION), ("-5", DEFAULT_RETENTION),
    ("4102444800s", 4102444800.0), ("4102444801s", DEFAULT_RETENTION),  # to 2100 (LATEST_TIME)
    ("inf", DEFAULT_RETENTION), ("nan", DEFAULT_RETENTION)])
def test_retention_reads_the_time_bound_of_what_prometheus_says(said: str, seconds: float) -> None:
    assert retention(_Answers(said)) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(("since", "step"), [
    (0.5, 1), (600, 1), (2000, 1), (2001, 2), (3998, 2), (3999, 2), (4000, 2), (4001, 3),
    (WIDE, 15), (15 * 86400, 648)])
def test_the_subquery_keeps_to_2000_buckets_of_whole_seconds(since: float, step: int) -> None:
    assert resolution(since) == step


def test_a_run_is_not_current_unless_found_at_now_and_its_length_is_never_negative() -> None:
    quiet = Run("e", "t", "0", "1", "n", "1", first=100.0, last=200.0, pushed=200.0)
    assert quiet.current is False and quiet.state(60, now=210.0) == STALE
    assert quiet.seconds == 100.0
    skewed = Run("e", "t", "0", "1", "n", "1", first=100.0, last=100.0, started=110.0,
                 pushed=100.0)
    assert skewed.seconds == 0.0  # started (its own clock) after its last push (the gateway's)
    once = Run("e", "t", "0", "1", "n", "1", first=100.0, last=100.0, pushed=100.0)
    assert once.seconds == 0.0
    with pytest.raises(AttributeError):  # shared by diagnose, trials and compare: read-only
        quiet.last = 300.0  # type: ignore[misc]


def test_a_push_from_a_clock_slightly_ahead_is_running_not_stale() -> None:
    ahead = Run("e", "t", "0", "1", "n", "1", first=100.0, last=200.0, pushed=1_000_002.0,
                current=True)
    assert ahead.state(60, now=1_000_000.0) == RUNNING
    at_limit = Run("e", "t", "0", "1", "n", "1", first=100.0, last=200.0, pushed=999_940.0,
                   current=True)
    assert at_limit.state(60, now=1_000_000.0) == RUNNING
    assert at_limit.state(59.5, now=1_000_000.0) == STALE


# A final read of one run: last_over_time(METRIC{...}[SPANms]), asked at an instant or, batched,
# as a one-point subquery @ that instant.
_FINAL_READ = re.compile(r"last_over_time\((\w+)\{[^}]*\}\[(\d+)ms\]\)(?:\)\[1ms:1ms\] @ ([0-9.]+))?")


def _final_reads(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, int, float]]:
    """(metric, range in ms, instant past BASE) of each final read find_runs asks from now on."""
    reads: set[tuple[str, int, float]] = set()
    get = PrometheusAPI.get

    def recorded(self: PrometheusAPI, path: str, **params: str) -> Any:
        for metric, span, at in _FINAL_READ.findall(params.get("query", "")):
            reads.add((metric, int(span), round(float(at or params["time"]) - BASE, 3)))
        return get(self, path, **params)

    monkeypatch.setattr(PrometheusAPI, "get", recorded)
    return reads


FINALS = (names.START_TIME, "push_time_seconds", names.EXIT)


def test_a_runs_final_values_are_read_from_its_own_part_of_its_last_bucket_alone(
        api: PrometheusAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the later of its first sample and its last bucket's start to its last sample, one
    millisecond more so that a sample at that start is in (3.x's ranges are open there): no
    earlier run of the rank in it, nor a wider range than the bucket."""
    reads = _final_reads(monkeypatch)
    [run] = find_runs(api, 600, experiment="m", now=BASE + 260.25)
    # Its last sample 501 ms into the 1 s bucket (BASE + 251, BASE + 252]: its first is before.
    assert (run.first - BASE, round(run.last - BASE, 3)) == (250.5, 251.501)
    assert (run.started, round(run.pushed - BASE, 3), run.exit_reason) == (BASE + 249, 250.501, None)
    assert reads == {(metric, 502, 251.501) for metric in FINALS}
    reads.clear()
    # A failed run and its restart in one 15 s bucket (BASE + 195, BASE + 210]: each from its
    # own first sample, 5 s and 2 s before their last.
    find_runs(api, WIDE, experiment="q", now=BASE + 212.25)
    assert reads == {(metric, span, at) for metric in FINALS
                     for span, at in ((5001, 205.0), (2001, 209.0))}


def test_a_bucket_time_that_is_no_unix_time_is_refused_as_one() -> None:
    """Prometheus's answer for the runs' first and last buckets must be times (1970 to 2100)."""
    with scripted_server() as (url, script):
        script.answer('{"status": "success", "data": {"resultType": "vector", "result": ['
                      '{"metric": {"experiment": "e", "trial": "t", "rank": "0", "pid": "1"}, '
                      '"value": [1795696000, "-5"]}]}}')
        with pytest.raises(PrometheusError, match=r"answered .*_over_time\(timestamp.* with "
                           r"'-5' where a Unix time \(finite, 0 to 4102444800: 1970 to 2100\)"):
            find_runs(PrometheusAPI(url), 600, now=1795696000.0)


def test_a_restart_with_the_same_pid_on_another_node_is_another_run(api: PrometheusAPI) -> None:
    runs = find_runs(api, 600, experiment="c", now=BASE + 340.25)
    assert [(r.nodename, r.first - BASE, r.last - BASE) for r in runs] == [
        ("n1", 300, 310), ("n2", 330, 335)]
    assert [r.exit_reason for r in runs] == ["failed", None]


def test_a_run_one_bound_read_finds_and_the_other_does_not_waits_for_the_next_read(
        api: PrometheusAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first and last buckets are two queries: a run whose first sample came between them
    is in one answer only, and is left out (found whole by the next read), not half read."""
    get = PrometheusAPI.get

    def late(self: PrometheusAPI, path: str, **params: str) -> Any:
        data = get(self, path, **params)
        if params.get("query", "").startswith("max_over_time("):  # read before it came
            data["result"] = [s for s in data["result"] if s["metric"].get("pid") != "200"]
        return data

    monkeypatch.setattr(PrometheusAPI, "get", late)
    runs = find_runs(api, 600, experiment="e", trial="t", now=BASE + 400.25)
    assert sorted(r.pid for r in runs) == ["100", "300"]
