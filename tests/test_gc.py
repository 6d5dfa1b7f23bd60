"""`trainwatch gc` against a real Pushgateway: a group that stopped pushing is deleted once it
is older than --max-age; a trial that is pushing is never touched."""

from __future__ import annotations

import functools
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

import trial_instrumentation as ti
from benchmarks.stack import Service, wait_until
from tests.trial_support import closed_port_url, pushed, pushed_value
from trainwatch import cli, gc
from trainwatch.cliutil import duration
from trainwatch.layout import StateDir
from trainwatch.procs import ProcRecord
from trainwatch.stack import commands, gc_loop
from trainwatch.stack.services import gc_status_file
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


def push_plain(pgw: Service, experiment: str) -> None:
    """A group pushed with its key in the URL path as it is (not base64), as a client may: a
    1,000,000-character name fits the Pushgateway's 1 MiB request line this way, while gc's
    base64 DELETE (a third longer) is refused with 431."""
    body = b"# TYPE trainwatch_trial_steps gauge\ntrainwatch_trial_steps 7\n"
    request = urllib.request.Request(
        f"{pgw.url}/metrics/job/{names.JOB}/experiment/{experiment}/trial/t/rank/0",
        data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def aged(pgw: Service, count: int, age: float = 1.0) -> None:
    """Wait until ``count`` groups of the job are due at ``age`` (a dry run lists them)."""
    gateway = gc.Pushgateway(pgw.url, 30, {})
    wait_until(lambda: len(gc.collect(gateway, names.JOB, age, dry_run=True)) == count,
               what=f"{count} groups to age past {age:g} s")


def test_a_group_whose_delete_fails_is_named_once_bounded_and_the_others_still_go(
        pushgateway: Service, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    monkeypatch.setattr(gc, "_reported", set())
    huge = "x" * 1_000_000
    push_plain(pushgateway, huge)  # the oldest: gc tries it first
    for trial in ("after-1", "after-2", "after-3"):
        push_dead_group(pushgateway, experiment="e", trial=trial, rank="0")
    aged(pushgateway, 4)
    argv = ["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 1
    assert [line.split(" (")[0] for line in out.splitlines()] == [
        f"deleted experiment=e,rank=0,trial=after-{n}" for n in (1, 2, 3)]
    named, summary = err.splitlines()
    assert named.startswith("trainwatch gc: cannot delete experiment=" + "x" * 200
                            + "…(1000000 chars),rank=0,trial=t (silent, last push ")
    assert ": 431 Request Header Fields Too Large; " in named and "/api/v1/admin/wipe" in named
    assert len(named) < 2000 and "x" * 201 not in named
    assert summary == (f"3 group(s) deleted of job {names.JOB} on {pushgateway.url}; "
                       "1 could not be deleted")
    wait_until(lambda: groups(pushgateway) == {key(experiment=huge, trial="t", rank="0")},
               timeout=5, what="the three deletes")
    # The next pass: the jammed group is counted, not named again; a new dead group goes.
    push_dead_group(pushgateway, experiment="e", trial="later", rank="0")
    aged(pushgateway, 2)
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert out.startswith("deleted experiment=e,rank=0,trial=later (silent, ")
    assert err == (f"1 group(s) deleted of job {names.JOB} on {pushgateway.url}; "
                   "1 could not be deleted\n")


def test_a_short_group_that_cannot_be_deleted_gets_its_curl_command(
        pushgateway: Service, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A DELETE refused for another reason (here every DELETE: a 405 from a read-only proxy is
    the same to gc) names the exact curl command that removes the group, escapes written out."""
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    monkeypatch.setattr(gc, "_reported", set())

    def refuse(self: gc.Pushgateway, group: gc.Group) -> None:
        raise gc.GcError(f"DELETE {self.url}{group.path()}: 405 Method Not Allowed")

    monkeypatch.setattr(gc.Pushgateway, "delete", refuse)
    push_dead_group(pushgateway, experiment="e", trial="t\n\x1b[2J", rank="0")
    aged(pushgateway, 1)
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"]) == 1
    named = capsys.readouterr().err.splitlines()[0]
    path = gc.Group({"job": names.JOB, "experiment": "e", "trial": "t\n\x1b[2J", "rank": "0"},
                    0).path()
    assert named.startswith("trainwatch gc: cannot delete experiment=e,rank=0,trial=t\\n\\x1b[2J ")
    assert named.endswith(f"; by hand: curl -X DELETE '{pushgateway.url}{path}'")
    assert "\x1b" not in named


def test_the_budget_stops_a_pass_and_names_what_it_left(
        pushgateway: Service, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that advances a second each time it is read (before each DELETE): a budget of
    2.5 s deletes the two oldest groups, then the pass stops and the rest wait, oldest first."""
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    for trial in ("t1", "t2", "t3", "t4"):
        push_dead_group(pushgateway, experiment="e", trial=trial, rank="0")
    aged(pushgateway, 4)
    ticks = iter(range(1000))
    gateway = gc.Pushgateway(pushgateway.url, 5, {})
    done = gc.sweep(gateway, names.JOB, 1.0, dry_run=False, budget=2.5,
                    clock=lambda: float(next(ticks)))
    assert [g.labels["trial"] for g in done.deleted] == ["t1", "t2"]
    assert [g.labels["trial"] for g in done.left] == ["t3", "t4"] and done.failed == []
    wait_until(lambda: groups(pushgateway) == {key(experiment="e", trial=t, rank="0")
                                               for t in ("t3", "t4")}, timeout=5,
               what="the two deletes")
    # The command says so, and exits 1; an ample budget then finishes the job with exit 0.
    monkeypatch.setattr(gc, "sweep", functools.partial(gc.sweep,
                                                       clock=lambda: float(next(ticks))))
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s",
                     "--budget", "1.5s"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("deleted experiment=e,rank=0,trial=t3 (") and out.count("\n") == 1
    left, summary = err.splitlines()
    assert left.startswith("trainwatch gc: the pass's budget (--budget 1.5s) ran out: 1 group(s) "
                           "due left for the next pass, the oldest "
                           "experiment=e,rank=0,trial=t4 (silent, last push ")
    assert summary == (f"1 group(s) deleted of job {names.JOB} on {pushgateway.url}; 1 left for "
                       "the next pass")
    monkeypatch.undo()
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"]) == 0
    assert capsys.readouterr().out.startswith("deleted experiment=e,rank=0,trial=t4 (")


def test_a_live_group_that_pushes_every_90s_survives_max_age_60s(
        pushgateway: Service) -> None:
    """The trial announces its interval with its group; --max-age 60s must not retire it
    before two of its intervals, while a group that announces none is retired at 60 s."""
    with ti.Trial(experiment="e", trial="slow-pusher", rank=0, pushgateway=pushgateway.url,
                  push_interval="90s"):
        push_dead_group(pushgateway, experiment="e", trial="silent", rank="0")
        gateway = gc.Pushgateway(pushgateway.url, 5, {})
        wait_until(lambda: len(gateway.groups(names.JOB)) == 2, what="both groups")
        (live,) = [g for g in gateway.groups(names.JOB) if g.labels["trial"] == "slow-pusher"]
        assert live.interval == 90.0 and not live.ended
        assert pushed_value(pushgateway, names.PUSH_INTERVAL,
                            trial="slow-pusher") == 90.0
        later = time.time() + 100  # 100 s after its push: past --max-age, before its next push
        deleted = gc.collect(gateway, names.JOB, 60.0, dry_run=False, now=later)
        assert [g.labels["trial"] for g in deleted] == ["silent"]
        wait_until(lambda: groups(pushgateway) == {key(experiment="e", trial="slow-pusher",
                                                       rank="0")}, timeout=5,
                   what="the silent group's delete")
        # Two intervals without a push: it died; now it goes.
        gone = gc.collect(gateway, names.JOB, 60.0, dry_run=True, now=time.time() + 181)
        assert [g.labels["trial"] for g in gone] == ["slow-pusher"]


@pytest.mark.parametrize(("value", "honoured"), [("90", 90.0), ("1e9", 86400.0), ("0", None),
                                                 ("-5", None), ("NaN", None), ("+Inf", 86400.0)])
def test_an_announced_interval_is_honoured_up_to_a_day(
        value: str, honoured: float | None) -> None:
    entry = {"labels": {"job": names.JOB}, "push_time_seconds": {"metrics": [{"value": "1e9"}]},
             names.PUSH_INTERVAL: {"metrics": [{"value": value}]}}
    group = gc._group(entry)
    assert group is not None and group.interval == honoured


def test_the_stacks_gc_loop_names_a_jammed_group_once_and_status_says_left_groups(
        pushgateway: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack's loop is one process: its log names the group on its first pass only, then
    one short line a pass; `stack status` says the passes leave groups, not that gc fails."""
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    monkeypatch.setattr(gc, "_reported", set())
    push_plain(pushgateway, "y" * 1_000_000)
    aged(pushgateway, 1)
    options = gc_loop.gc_args(["--pushgateway", pushgateway.url, "--max-age", "1s"])
    logs = []
    for _ in range(3):
        assert gc_loop.one_pass(options) == 1
        logs.append(capsys.readouterr().out.splitlines())
    assert [len(lines) for lines in logs] == [2, 1, 1]
    assert "cannot delete experiment=" + "y" * 200 + "…(1000000 chars)" in logs[0][0]
    assert all(len(line) < 2000 for lines in logs for line in lines)
    assert logs[2][0].endswith(f"0 group(s) deleted of job {names.JOB} on {pushgateway.url}; "
                               "1 could not be deleted")
    state = StateDir(tmp_path)
    gc_status_file(state).parent.mkdir(parents=True)
    gc_loop.Pass(time.time(), 1, 30.0).save(gc_status_file(state))
    said: list[str] = []
    record = ProcRecord("gc", 1, 0, ())
    assert not commands._gc_view(state, record, "", said.append)
    assert "alive, LEFT GROUPS: last pass 0 s ago, exit 1" in said[0]
    gc_loop.Pass(time.time(), 2, 30.0).save(gc_status_file(state))
    assert not commands._gc_view(state, record, "", said.append)
    assert "alive, FAILING: last pass 0 s ago, exit 2" in said[1]


def test_a_pushgateway_that_stops_answering_mid_pass_ends_the_pass_in_one_line(
        pushgateway: Service, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not one failure per group (20,000 lines, each waiting its --timeout): the pass stops at
    the first DELETE that gets no answer, says what it left, and exits 2."""
    monkeypatch.setattr(gc, "MIN_MAX_AGE", 1.0)
    monkeypatch.setattr(gc, "_reported", set())
    for trial in ("t1", "t2", "t3", "t4"):
        push_dead_group(pushgateway, experiment="e", trial=trial, rank="0")
    aged(pushgateway, 4)
    real = gc.Pushgateway.delete

    def delete_then_stop(self: gc.Pushgateway, group: gc.Group) -> None:
        real(self, group)
        pushgateway.stop()  # gone after the first DELETE

    monkeypatch.setattr(gc.Pushgateway, "delete", delete_then_stop)
    assert cli.main(["gc", "--pushgateway", pushgateway.url, "--max-age", "1s"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("deleted experiment=e,rank=0,trial=t1 (") and out.count("\n") == 1
    stopped, summary = err.splitlines()
    assert stopped.startswith(f"trainwatch gc: error: cannot reach the Pushgateway at "
                              f"{pushgateway.url}: ")
    assert stopped.endswith("; the pass stopped, 3 group(s) due left for the next pass")
    assert summary == (f"1 group(s) deleted of job {names.JOB} on {pushgateway.url}; 3 left for "
                       "the next pass")
