"""trainwatch.lookup without a stack: the order a URL is taken in (flag, environment, the
running stack's pid records), a stack service told by a process this test starts with the
stack's marks (trainwatch.procs.spawn, a shell that sleeps), and the note on a
$TRAINWATCH_PROMETHEUS that is not the $TRAINWATCH_STATE_DIR stack's (its flags served by a
scripted loopback server, tests/loopback.py)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.stack import wait_until
from tests.loopback import scripted_server
from tests.trial_support import closed_port_url
from trainwatch import procs
from trainwatch.layout import StateDir
from trainwatch.lookup import (
    ENV_PROMETHEUS,
    LISTEN_FLAG,
    NoPrometheus,
    listen_port,
    mismatch,
    prometheus_url,
    pushgateway_url,
    stack_note,
    stack_url,
)
from trainwatch.procs import ProcRecord


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    state = StateDir.resolve(tmp_path / "stack")
    state.prepare()
    return state


@pytest.fixture
def running(state: StateDir) -> Iterator[ProcRecord]:
    """A 'prometheus' of ``state``'s stack: a shell carrying the stack's marks, its argv the
    listen flag (port 19123) among others."""
    argv = ["sh", "-c", "exec sleep 60", "--config.file=x", f"{LISTEN_FLAG}127.0.0.1:19123",
            "--web.listen-address=ignored:1"]
    proc, record = procs.spawn("prometheus", argv, str(state.root), state.log_file("p"),
                               state.root)
    try:
        # Until the shell has exec'd sleep: while an exec is under way /proc reads the
        # environment as empty for a moment, and the process as no one's (test_procs_unit).
        wait_until(lambda: procs.argv_of(proc.pid)[:1] == ("sleep",)
                   and procs.is_ours(record, str(state.root)), timeout=5.0,
                   what="the stack's marked sleep", interval=0.01)
        record.save(state.pid_file("prometheus"))
        yield record
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def env_of(state: StateDir, **more: str) -> dict[str, str]:
    return {"TRAINWATCH_STATE_DIR": str(state.root), **more}


# The order a URL is taken in


def test_a_given_url_wins_over_the_environment_and_the_stack(state: StateDir) -> None:
    assert prometheus_url("http://given:1", env_of(state, TRAINWATCH_PROMETHEUS="http://e:2")) \
        == "http://given:1"
    assert pushgateway_url("http://given:3", {"TRAINWATCH_PUSHGATEWAY": "http://e:4"}) \
        == "http://given:3"


def test_the_environment_is_next_and_an_empty_one_counts_as_unset(state: StateDir) -> None:
    assert prometheus_url(None, {ENV_PROMETHEUS: "http://e:2"}) == "http://e:2"
    assert prometheus_url("", {ENV_PROMETHEUS: "http://e:2"}) == "http://e:2"
    assert pushgateway_url(None, {"TRAINWATCH_PUSHGATEWAY": "http://e:4"}) == "http://e:4"
    with pytest.raises(NoPrometheus, match="^no Prometheus: pass --prometheus URL, set "
                       "TRAINWATCH_PROMETHEUS, or start one"):
        prometheus_url(None, env_of(state, TRAINWATCH_PROMETHEUS=""))
    with pytest.raises(NoPrometheus, match="^no Pushgateway: pass --pushgateway URL, set "
                       "TRAINWATCH_PUSHGATEWAY, or start one"):
        pushgateway_url(None, env_of(state, TRAINWATCH_PUSHGATEWAY=""))


def test_the_process_environment_is_read_when_none_is_given(
        state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_STATE_DIR", str(state.root))
    monkeypatch.setenv("TRAINWATCH_PROMETHEUS", "http://from-env:5")
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", "http://from-env:6")
    assert prometheus_url(None) == "http://from-env:5"
    assert pushgateway_url(None) == "http://from-env:6"
    monkeypatch.delenv("TRAINWATCH_PROMETHEUS")
    monkeypatch.delenv("TRAINWATCH_PUSHGATEWAY")
    for find in (prometheus_url, pushgateway_url):
        with pytest.raises(NoPrometheus, match=f"with state in {state.root};"):
            find(None)
    with pytest.raises(NoPrometheus, match=f"with state in {state.root};"):
        stack_url("pushgateway", "x")


def test_with_neither_the_running_stacks_service_is_read(
        state: StateDir, running: ProcRecord) -> None:
    assert prometheus_url(None, env_of(state)) == "http://127.0.0.1:19123"
    assert stack_url("prometheus", "x", env_of(state)) == "http://127.0.0.1:19123"
    # The Pushgateway's record is missing: none runs.
    with pytest.raises(NoPrometheus) as caught:
        pushgateway_url(None, env_of(state))
    assert str(caught.value) == (
        "no Pushgateway: pass --pushgateway URL, set TRAINWATCH_PUSHGATEWAY, or start one with "
        f"`trainwatch stack up` (none runs with state in {state.root}; TRAINWATCH_STATE_DIR "
        "picks another)")


def test_a_record_that_is_not_the_stacks_live_process_is_no_service(
        state: StateDir, running: ProcRecord, tmp_path: Path) -> None:
    path = state.pid_file("prometheus")
    env = env_of(state)
    # Another stack's process (the marks name another state directory).
    other = StateDir.resolve(tmp_path / "other")
    other.prepare()
    running.save(other.pid_file("prometheus"))
    with pytest.raises(NoPrometheus, match=f"state in {other.root};"):
        stack_url("prometheus", "x", {"TRAINWATCH_STATE_DIR": str(other.root)})
    # The same pid started at another time (a reused pid).
    ProcRecord("prometheus", running.pid, running.start_time + 1, running.argv).save(path)
    with pytest.raises(NoPrometheus):
        stack_url("prometheus", "x", env)
    # Recorded as another service of the same stack.
    ProcRecord("pushgateway", running.pid, running.start_time, running.argv).save(path)
    with pytest.raises(NoPrometheus):
        stack_url("prometheus", "x", env)
    # Started without the listen flag: its port is unknown.
    ProcRecord("prometheus", running.pid, running.start_time, ("prometheus", "--x")).save(path)
    with pytest.raises(NoPrometheus):
        stack_url("prometheus", "x", env)
    # A corrupt record, and a directory where the record would be.
    path.write_text("{not json")
    with pytest.raises(NoPrometheus):
        stack_url("prometheus", "x", env)
    path.unlink()
    path.mkdir()
    with pytest.raises(NoPrometheus):
        stack_url("prometheus", "x", env)


def test_listen_port_is_the_first_listen_flags_port() -> None:
    def rec(*argv: str) -> ProcRecord:
        return ProcRecord("s", 2, 3, argv)

    assert listen_port(rec("p", "--web.listen-address=0.0.0.0:9090")) == 9090
    assert listen_port(rec("--web.listen-address=[::1]:17", "--web.listen-address=:18")) == 17
    assert listen_port(rec("p", "--web.listen-address.x=1:5", "x--web.listen-address=h:4")) \
        is None
    assert listen_port(rec()) is None


# The note on a Prometheus that is not the stack's


def test_a_url_with_the_state_directory_set_prints_a_note_when_they_disagree(
        state: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    with scripted_server() as (url, script):
        script.answer(json.dumps({"status": "success",
                                  "data": {"storage.tsdb.path": "/elsewhere/data"}}))
        assert prometheus_url(None, env_of(state, TRAINWATCH_PROMETHEUS=url + "/")) == url + "/"
        [sent] = script.requests
        assert sent.path == "/api/v1/status/flags"
        assert capsys.readouterr().err == (
            f"trainwatch: note: Prometheus at {url}/ ($TRAINWATCH_PROMETHEUS) is no trainwatch "
            f"stack's (its data: /elsewhere/data), not the one in {state.root} "
            f"($TRAINWATCH_STATE_DIR): unset TRAINWATCH_PROMETHEUS to read {state.root}'s\n")
        script.answer(json.dumps({"status": "success", "data": {
            "storage.tsdb.path": str(state.data("prometheus") / "data")}}))
        assert prometheus_url(None, env_of(state, TRAINWATCH_PROMETHEUS=url)) == url
        assert capsys.readouterr().err == ""
        # Without the state directory set, the flags are never asked for.
        script.answer("{}")
        assert prometheus_url(None, {ENV_PROMETHEUS: url}) == url
        assert script.requests == [] and capsys.readouterr().err == ""


@pytest.mark.parametrize("body", [
    "not json", "[]", '{"data": {}}', '{"data": []}', '{"data": {"storage.tsdb.path": 5}}',
    '{"status": "success"}'])
def test_flags_that_cannot_be_read_leave_no_note(state: StateDir, body: str) -> None:
    with scripted_server() as (url, script):
        script.answer(body)
        assert stack_note(url, state) is None
    assert stack_note(closed_port_url(), state, timeout=2.0) is None


def test_mismatch_names_whose_prometheus_it_is() -> None:
    mine = StateDir(Path("/tmp/mine"))
    url = "http://127.0.0.1:9090"
    assert mismatch(url, Path("/tmp/mine/prometheus/data"), mine) is None
    assert mismatch(url, Path("/tmp/theirs/prometheus/data"), mine) == (
        f"Prometheus at {url} ($TRAINWATCH_PROMETHEUS) is the trainwatch stack's in /tmp/theirs, "
        "not the one in /tmp/mine ($TRAINWATCH_STATE_DIR): unset TRAINWATCH_PROMETHEUS to read "
        "/tmp/mine's")
    for other in ("/tmp/theirs/grafana/data", "/tmp/theirs/prometheus/tsdb",
                  "theirs/prometheus/data", "/prometheus"):
        said = mismatch(url, Path(other), mine)
        assert said is not None and f"is no trainwatch stack's (its data: {other}), not " in said
