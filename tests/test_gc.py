"""`trainwatch gc` against a real Pushgateway: a group that stopped pushing is deleted once it
is older than --max-age; a trial that is pushing is never touched."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

import trial_instrumentation as ti
from benchmarks.stack import Service, wait_until
from tests.trial_support import closed_port_url, pushed
from trainwatch import cli, gc
from trainwatch.cliutil import duration
from trial_instrumentation import names


def push_dead_group(pgw: Service, **key: str) -> None:
    """What a SIGKILLed trial leaves: one push, then nothing."""
    registry = CollectorRegistry()
    Gauge("trainwatch_trial_steps", "steps", registry=registry).set(7)
    push_to_gateway(pgw.url, names.JOB, registry, grouping_key=key)


def groups(pgw: Service) -> set[tuple[tuple[str, str], ...]]:
    return {tuple(sorted(g.labels.items()))
            for g in gc.Pushgateway(pgw.url, 5, {}).groups(names.JOB)}


def key(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"job": names.JOB, **labels}.items()))


def test_gc_deletes_the_stale_group_and_never_the_live_trial(
        pushgateway: Service, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Ages of a second, not minutes: the floor on --max-age has its own test.
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    dead = {"experiment": "exp", "trial": "lr-0.1", "rank": "0"}  # the live one's twin rank
    # A slash and an empty value (another client's): the delete must address exactly it.
    odd = {"experiment": "exp", "trial": "lr/0.1", "rank": ""}
    push_dead_group(pushgateway, **dead)
    push_dead_group(pushgateway, **odd)
    with ti.Trial(experiment="exp", trial="lr-0.1", rank=1, world_size=2,
                  pushgateway=pushgateway.url,
                  push_interval=0.2) as live:
        live_key = key(experiment="exp", trial="lr-0.1", rank="1")
        wait_until(lambda: live_key in groups(pushgateway), what="the live trial's first push")
        gateway = gc.Pushgateway(pushgateway.url, 5, {})
        # Poll (dry run) until the dead groups are past the age: gc must then list only them.
        stale = wait_until(lambda: len(found := gc.collect(gateway, names.JOB, 1.0,
                                                           dry_run=True)) == 2 and found,
                           what="the dead groups to age past 1 s")
        assert sorted(key(**g.labels) for g in stale) == sorted([key(**dead), key(**odd)])
        assert groups(pushgateway) == {key(**dead), key(**odd), live_key}

        code = cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"])
        out, err = capsys.readouterr()
        assert code == 0
        assert sorted(line.split(" (")[0] for line in out.splitlines()) == [
            "deleted experiment=exp,rank=,trial=lr/0.1", "deleted experiment=exp,rank=0,trial=lr-0.1"]
        assert err == f"2 group(s) deleted of job {names.JOB} on {pushgateway.url}\n"
        # DELETE is answered 202 and applied just after: wait for it, briefly.
        wait_until(lambda: groups(pushgateway) == {live_key}, timeout=5, what="the deletes")
        for _ in range(3):  # the live trial goes on pushing through repeated runs
            assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"]) == 0
            assert live_key in groups(pushgateway)
        assert live.enabled
    # The clean exit deleted nothing: its final push stays, marked, until gc retires it.
    (ended,) = gc.Pushgateway(pushgateway.url, 5, {}).groups(names.JOB)
    assert key(**ended.labels) == live_key and ended.ended
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1h"]) == 0
    assert groups(pushgateway) == {live_key}  # not yet past the default --ended-after
    gateway = gc.Pushgateway(pushgateway.url, 5, {})
    wait_until(lambda: gc.collect(gateway, names.JOB, 3600, dry_run=True, ended_after=1.0),
               what="the ended group to age past 1 s")
    capsys.readouterr()
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1h",
                     "--ended-after", "1s"]) == 0
    assert capsys.readouterr().out.startswith("deleted experiment=exp,rank=1,trial=lr-0.1 (ended, ")
    wait_until(lambda: pushed(pushgateway) == {}, timeout=5, what="the ended group's delete")


def test_an_ended_group_waits_for_ended_after_and_a_silent_one_for_max_age() -> None:
    class Gateway:
        def __init__(self) -> None:
            self.deleted: list[gc.Group] = []

        def groups(self, job: str) -> list[gc.Group]:
            return [gc.Group({"job": job, "trial": "ended"}, 1000.0, ended=True),
                    gc.Group({"job": job, "trial": "silent"}, 1000.0)]

        def delete(self, group: gc.Group) -> None:
            self.deleted.append(group)

    def deleted(now: float, **ages: float) -> list[str]:
        gateway = Gateway()
        gc.collect(gateway, names.JOB, dry_run=False, now=now, **ages)  # type: ignore[arg-type]
        return [g.labels["trial"] for g in gateway.deleted]

    assert deleted(1000.0 + 120, max_age=3600, ended_after=120) == []  # not older: kept
    assert deleted(1000.0 + 121, max_age=3600, ended_after=120) == ["ended"]
    assert deleted(1000.0 + 3601, max_age=3600, ended_after=120) == ["ended", "silent"]
    assert deleted(1000.0 + 121, max_age=3600) == []  # without ended_after: max_age for all


def test_gc_with_a_young_group_deletes_nothing(pushgateway: Service,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    push_dead_group(pushgateway, experiment="e", trial="t", rank="0")
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1h"]) == 0
    assert capsys.readouterr().out == ""
    assert groups(pushgateway) == {key(experiment="e", trial="t", rank="0")}


def test_other_jobs_are_left_alone(pushgateway: Service) -> None:
    registry = CollectorRegistry()
    Gauge("batch_done", "x", registry=registry).set(1)
    push_to_gateway(pushgateway.url, "nightly_batch", registry)
    gateway = gc.Pushgateway(pushgateway.url, 5, {})
    wait_until(lambda: gc.collect(gateway, "nightly_batch", 1.0, dry_run=True),
               what="the other job's group to age past 1 s")
    assert gc.collect(gateway, names.JOB, 1.0, dry_run=False) == []
    assert [g.labels["job"] for g in gateway.groups("nightly_batch")] == ["nightly_batch"]


def test_an_unreachable_pushgateway_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = closed_port_url()
    assert cli.main(["gc", "--pushgateway", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainwatch gc: error: cannot reach the Pushgateway at {url}: ")
    assert err.count("\n") == 1


def test_a_bad_age_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["gc", "--max-age", "soon", "--pushgateway", "http://127.0.0.1:9"])
    assert exit_.value.code == 2
    assert "not a duration: 'soon' (e.g. 90s, 30m, 1h, 2d)" in capsys.readouterr().err


def test_durations() -> None:
    assert [duration(t) for t in ("90", "90s", "30m", "1h", "2d", "0.5s")] == \
        [90, 90, 1800, 3600, 172800, 0.5]


@pytest.mark.parametrize(("args", "said"), [
    (("--max-age", "3s"), "--max-age 3s is below 60s: it would delete the groups of live trials"),
    (("--max-age", "0s"), "--max-age 0s is below 60s"),
    (("--ended-after", "0s"), "--ended-after must be above 0 s"),
    (("--timeout", "-1"), "--timeout -1 is not above 0 seconds"),
])
def test_what_would_delete_live_groups_is_refused_before_any_request(
        args: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["gc", "--pushgateway", closed_port_url(), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainwatch gc: error: ") and said in err and err.count("\n") == 1


@pytest.mark.parametrize("body", [b'{"status":"success","data":[1,2,3]}',
                                  b'{"status":"success","data":{"a":1}}', b"[]"])
def test_an_answer_that_is_no_pushgateways_is_an_error(
        body: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        assert cli.main(["gc", "--pushgateway", f"http://127.0.0.1:{server.server_port}"]) == 2
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert "not a Pushgateway's answer" in err and err.count("\n") == 1
