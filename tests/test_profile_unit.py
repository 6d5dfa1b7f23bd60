"""`trainwatch profile` without a Prometheus or a trial: a fake API answers the two queries,
os.kill is a stand-in that writes the trial's answer, and the answer loop's sleep is a
stand-in that moves the trial on, so who is asked, how, what is printed and the exit code are
checked in milliseconds. The live tests are tests/test_profile_cli.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainwatch import profile
from trainwatch.promapi import PrometheusError
from trial_instrumentation import names, profile_ack

HERE = os.uname().nodename
URL = "http://prom.test:9090"
KEY = f'job="{names.JOB}", experiment="e", trial="t"'


def info(rank: str, pid: str = "", node: str = HERE, **labels: str) -> tuple[dict[str, str], float]:
    return {"rank": rank, "pid": pid or str(4000 + len(rank) * 7 + sum(map(ord, rank))),
            "nodename": node, **labels}, 1.0


class FakeAPI:
    def __init__(self, table: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.table = table
        self.asked: list[str] = []
        self.url = URL

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        self.asked.append(expr)
        if isinstance(self.table, Exception):
            raise self.table
        return self.table.get(expr, [])


def api_of(ranks: list[tuple[dict[str, str], float]], ended: tuple[str, ...] = (),
           key: str = KEY) -> FakeAPI:
    return FakeAPI({f"{names.TRIAL_INFO}{{{key}}}": ranks,
                    f"{names.EXIT}{{{key}}}": [({"rank": r, "reason": "clean"}, 1.0)
                                               for r in ended]})


def answer(path: Path, state: str, message: str, at: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"state": state, "message": message,
                                "at": time.time() if at is None else at}))


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The fake Prometheus (set ``world["api"]``), the signals sent, and what each signal makes
    the trial answer (``world["reply"]``: pid -> state, message)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    state: dict[str, Any] = {"api": api_of([]), "sent": [], "reply": {}, "opened": []}

    def make_api(url: str, timeout: float) -> FakeAPI:
        state["opened"].append((url, timeout))
        if isinstance(state["api"], ValueError):  # PrometheusAPI's word on a bad URL
            raise state["api"]
        return state["api"]  # type: ignore[no-any-return]

    def kill(pid: int, sig: signal.Signals) -> None:
        state["sent"].append((pid, sig))
        reply = state["reply"].get(pid, ("written", f"trace of {pid} written"))
        if isinstance(reply, BaseException):
            raise reply
        answer(profile_ack.by_pid(pid), *reply)

    monkeypatch.setattr(profile, "PrometheusAPI", make_api)
    monkeypatch.setattr(profile.os, "kill", kill)
    return state


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    profile.add_parser(parser.add_subparsers())
    return parser.parse_args(["profile", "--experiment", "e", "--trial", "t", "--prometheus",
                              URL, *argv])


# --- which ranks run --------------------------------------------------------------------------


def test_the_running_ranks_are_those_without_an_exit_in_rank_order() -> None:
    api = api_of([info("10", "110"), info("x", "999"), info("2", "102", node="n2", pod="p",
                                                                namespace="ns"),
                  info("0", "100"), info("3", "103"), info("4", "pid4"), info("5", "")],
                 ended=("3",))
    api.table[f"{names.TRIAL_INFO}{{{KEY}}}"][-1][0]["pid"] = ""  # rank 5: no pid at all
    ranks = profile.running_ranks(api, "e", "t", None)  # type: ignore[arg-type]
    assert [r.rank for r in ranks] == ["x", "0", "2", "10"]
    assert ranks[2] == profile.Rank("2", "n2", 102, "p", "ns")
    assert ranks[1] == profile.Rank("0", HERE, 100, None, None)
    assert api.asked == [f"{names.EXIT}{{{KEY}}}", f"{names.TRIAL_INFO}{{{KEY}}}"]


def test_a_rank_that_is_no_number_sorts_with_rank_0_in_the_order_found() -> None:
    """(Above, it came before rank 0 and stays first; here after it, and stays after.)"""
    api = api_of([info("1", "101"), info("0", "100"), info("x", "999")])
    assert [r.rank for r in profile.running_ranks(api, "e", "t", None)] == ["0", "x", "1"]  # type: ignore[arg-type]


def test_a_rank_is_asked_for_by_its_label_and_a_series_without_a_node_has_none() -> None:
    key = KEY + ', rank="1"'
    api = api_of([({"rank": "1", "pid": "77"}, 1.0)], key=key)
    assert profile.running_ranks(api, "e", "t", "1") == [profile.Rank("1", "", 77)]  # type: ignore[arg-type]


# --- the command ---------------------------------------------------------------------------


def test_each_local_rank_is_signalled_and_its_answer_printed(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("1", "201"), info("0", "200")])
    assert profile.run(args("--timeout", "4")) == 0
    assert world["opened"] == [(URL, 4.0)]
    assert world["sent"] == [(200, signal.SIGUSR2), (201, signal.SIGUSR2)]
    assert capsys.readouterr() == (
        ("sent SIGUSR2 to pid 200, 201; waiting for the answer\n"
        "rank 0: trace of 200 written\nrank 1: trace of 201 written\n"), "")


@pytest.mark.parametrize(("given", "sent"), [("usr1", signal.SIGUSR1), (" SIGTERM ", signal.SIGTERM),
                                              ("Sigusr2", signal.SIGUSR2), ("hup", signal.SIGHUP)])
def test_the_signal_is_named_with_or_without_sig(given: str, sent: signal.Signals,
                                                 world: dict[str, Any]) -> None:
    world["api"] = api_of([info("0", "200")])
    assert profile.run(args("--signal", given)) == 0
    assert world["sent"] == [(200, sent)]


def test_an_unknown_signal_is_a_usage_error_before_any_query(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert profile.run(args("--signal", "nope\x1b")) == 2
    assert capsys.readouterr().err == "trainwatch profile: error: 'SIGNOPE\\x1b'\n"
    assert world["opened"] == [] and world["sent"] == []


def test_an_unreadable_prometheus_is_a_usage_error(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = FakeAPI(PrometheusError("cannot reach Prometheus\n"))  # type: ignore[arg-type]
    assert profile.run(args()) == 2
    assert capsys.readouterr().err == "trainwatch profile: error: cannot reach Prometheus\\n\n"


def test_a_bad_prometheus_url_is_a_usage_error(world: dict[str, Any],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = ValueError("--prometheus: 'x' is not an http(s) URL")
    assert profile.run(args()) == 2
    assert capsys.readouterr().err == ("trainwatch profile: error: --prometheus: 'x' is not an "
                                       "http(s) URL\n")


@pytest.mark.parametrize(("extra", "who"), [((), "e/t"), (("--rank", "3"), "e/t rank 3")])
def test_no_running_rank_is_a_usage_error(extra: tuple[str, ...], who: str,
                                          world: dict[str, Any],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200")], ended=("0",))
    assert profile.run(args(*extra)) == 2
    assert capsys.readouterr() == ("", (f"trainwatch profile: error: no running trial {who} in "
                                   f"Prometheus at {URL} (`trainwatch trials` lists them)\n"))
    assert world["sent"] == []


def test_a_rank_elsewhere_gets_its_command_and_exit_1_while_local_ones_are_asked(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200", node="far;x"), info("1", "201")])
    assert profile.run(args()) == 1
    out = capsys.readouterr().out
    assert out == (f"rank 0 runs on far;x, not here ({HERE}); ask it with:\n"
                   "  ssh 'far;x' kill -USR2 200\n"
                   "sent SIGUSR2 to pid 201; waiting for the answer\n"
                   "rank 1: trace of 201 written\n")
    assert world["sent"] == [(201, signal.SIGUSR2)]


def test_only_remote_ranks_send_nothing_and_wait_for_nothing(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200", node="n2", pod="pod-0", namespace="ml")])
    assert profile.run(args()) == 1
    assert capsys.readouterr().out == (f"rank 0 runs on n2, not here ({HERE}); ask it with:\n"
                                       "  kubectl exec -n ml pod-0 -- kill -USR2 200\n")


@pytest.mark.parametrize(("error", "said"), [
    (ProcessLookupError(), f"rank 0: no process 200 on {HERE}: has the trial ended?\n"),
    (PermissionError(), ("rank 0: not allowed to signal pid 200; run as its user:\n"
                        "  kill -USR1 200\n"))])
def test_a_process_that_cannot_be_signalled_is_a_usage_error(
        error: BaseException, said: str, world: dict[str, Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200"), info("1", "201")])
    world["reply"][200] = error
    assert profile.run(args("--signal", "USR1")) == 2
    assert capsys.readouterr() == ("", said)
    assert world["sent"] == [(200, signal.SIGUSR1)]  # and rank 1 is not asked


def test_steps_without_the_trigger_is_said_and_the_signal_still_sent(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200")])
    assert profile.run(args("--steps", "9")) == 0
    out, err = capsys.readouterr()
    assert err == (f"trainwatch profile: the signal records the trial's own "
                   f"{names.ENV_PROFILE_STEPS} (default 5); --steps needs --trigger\n")
    assert world["sent"] == [(200, signal.SIGUSR2)] and "rank 0: trace of 200 written" in out


def test_a_refusal_is_exit_1(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200"), info("1", "201")])
    world["reply"][201] = (profile_ack.REFUSED, "a capture is running")
    assert profile.run(args()) == 1
    assert capsys.readouterr().out.endswith("rank 1: a capture is running\n")


@pytest.mark.parametrize(("wait", "waited"), [((), profile.WAIT_SIGNAL), (("--wait", "2m"), 120.0)])
def test_the_signal_waits_five_seconds_unless_told(
        wait: tuple[str, ...], waited: float, world: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Path], float]] = []
    def answers(asked: dict[str, Path], since: float, wait: float) -> int:
        seen.append((asked, wait))
        return 0

    monkeypatch.setattr(profile, "answers", answers)
    world["api"] = api_of([info("0", "200"), info("1", "201", node="elsewhere")])
    before = time.time()
    assert profile.run(args(*wait)) == 1  # rank 1 elsewhere
    assert seen == [({"0": profile_ack.by_pid(200)}, waited)]
    assert time.time() >= before and (profile.WAIT_SIGNAL, profile.WAIT_TRIGGER) == (5.0, 15.0)


# --- the trigger file --------------------------------------------------------------------


@pytest.mark.parametrize(("steps", "written"), [(("--steps", "7"), "7\n"), ((), "")])
def test_the_trigger_is_written_and_each_ranks_answer_read_beside_it(
        steps: tuple[str, ...], written: str, world: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    trigger = tmp_path / "profile.trigger"
    world["api"] = api_of([info("1", "201", node="n2"), info("0", "200", node="n3")])
    answer(profile_ack.beside(trigger, "0"), "written", "rank 0's trace written",
           at=time.time() - 1.5)  # another node's clock, a little behind: still an answer
    answer(profile_ack.beside(trigger, "1"), "dropped", "no torch")
    assert profile.run(args("--trigger", str(trigger), *steps)) == 1
    assert trigger.read_text() == written
    assert world["sent"] == []
    assert capsys.readouterr().out == (
        f"wrote {trigger}: each rank watching it (0, 1) takes it at its next push; waiting for "
        "the answers\nrank 0: rank 0's trace written\nrank 1: no torch\n")


def test_an_answer_older_than_the_request_is_none(world: dict[str, Any], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    trigger = tmp_path / "t"
    world["api"] = api_of([info("0", "200")])
    answer(profile_ack.beside(trigger, "0"), "written", "an old one", at=time.time() - 2.5)
    assert profile.run(args("--trigger", str(trigger), "--wait", "0.001s")) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        ("rank 0: no answer within 0.001 s (a step longer than that, or a trial library "
        "without answers): its log says what it did")]


def test_the_trigger_waits_fifteen_seconds_unless_told(
        world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Path], float, float]] = []
    def answers(asked: dict[str, Path], since: float, wait: float) -> int:
        seen.append((asked, since, wait))
        return 0

    monkeypatch.setattr(profile, "answers", answers)
    world["api"] = api_of([info("0", "200"), info("2", "202")])
    trigger = tmp_path / "t"
    before = time.time()
    assert profile.run(args("--trigger", str(trigger))) == 0
    assert profile.run(args("--trigger", str(trigger), "--wait", "3s")) == 0
    assert [s[2] for s in seen] == [15.0, 3.0]
    assert seen[0][0] == {"0": Path(f"{trigger}.rank0.json"), "2": Path(f"{trigger}.rank2.json")}
    assert before - 2.0 <= seen[0][1] <= time.time() - 2.0


def test_a_trigger_that_cannot_be_written_is_a_usage_error(
        world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200")])
    trigger = tmp_path / "missing" / "t"
    assert profile.run(args("--trigger", str(trigger))) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"trainwatch profile: error: cannot write {trigger}: ")
    assert "No such file or directory" in err and err.count("\n") == 1


# --- waiting for the answers -------------------------------------------------------------


@pytest.fixture
def turns(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[Callable[[], None]]], list[float]]:
    """The answer loop's sleep replaced: each sleep plays the next turn of the trials (and
    the wait's deadline never passes while turns remain)."""
    def install(steps: list[Callable[[], None]]) -> list[float]:
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            steps.pop(0)()

        monkeypatch.setattr(profile.time, "sleep", sleep)
        return slept
    return install


def test_a_state_is_printed_once_each_time_it_changes(
        tmp_path: Path, turns: Callable[[list[Callable[[], None]]], list[float]],
        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    answer(a, profile_ack.STARTED, "recording 5 steps")
    slept = turns([lambda: None,
                   lambda: answer(b, profile_ack.STARTED, "b recording"),
                   lambda: answer(a, profile_ack.WRITTEN, "a written"),
                   lambda: answer(b, profile_ack.WRITTEN, "b written")])
    assert profile.answers({"0": a, "1": b}, 0.0, 60.0) == 0
    assert capsys.readouterr().out == ("rank 0: recording 5 steps\nrank 1: b recording\n"
                                       "rank 0: a written\nrank 1: b written\n")
    assert slept == [profile.POLL] * 4 and profile.POLL == 0.05


@pytest.mark.parametrize("state", [profile_ack.REFUSED, profile_ack.DROPPED])
def test_a_refused_or_dropped_request_ends_that_ranks_wait_with_exit_1(
        state: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.json"
    answer(path, state, "why\x1b")
    assert profile.answers({"r\n": path}, 0.0, 60.0) == 1
    assert capsys.readouterr().out == "rank r\\n: why\\x1b\n"


def test_at_the_deadline_each_pending_rank_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started, silent, done = tmp_path / "s.json", tmp_path / "none.json", tmp_path / "d.json"
    answer(started, profile_ack.STARTED, "recording")
    answer(done, profile_ack.WRITTEN, "written")
    (tmp_path / "old.json").write_text("{}")
    assert profile.answers({"0": started, "1": silent, "2": done}, 0.0, 0.0) == 0
    assert capsys.readouterr().out.splitlines() == [
        "rank 0: recording", "rank 2: written",
        ("rank 0: still recording after 0 s; its log names the file when written, "
        "`trainwatch diagnose` shows the summary"),
        ("rank 1: no answer within 0 s (a step longer than that, or a trial library without "
        "answers): its log says what it did")]


def test_the_wait_ends_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    clock = [1000.0]
    slept: list[float] = []
    monkeypatch.setattr(profile.time, "monotonic", lambda: clock[0])

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += 1.0

    monkeypatch.setattr(profile.time, "sleep", sleep)
    assert profile.answers({"0": tmp_path / "none.json"}, 0.0, 3.0) == 0
    assert len(slept) == 3  # at 1000, 1001, 1002; at 1003 the deadline has come
    assert capsys.readouterr().out.startswith("rank 0: no answer within 3 s")


def test_a_message_that_is_missing_is_empty(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"state": "written", "at": time.time()}))
    assert profile.answers({"0": path}, 0.0, 0.0) == 0
    assert capsys.readouterr().out == "rank 0: \n"


def test_the_defaults() -> None:
    got = args()
    assert (got.rank, got.steps, got.trigger, got.signal, got.wait) == (None, None, None,
                                                                         "USR2", None)
    assert args("--trigger", "x", "--steps", "3").trigger == Path("x")


def test_a_rank_is_immutable() -> None:
    rank = profile.Rank("0", "n1", 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rank.pid = 8  # type: ignore[misc]


@pytest.mark.parametrize("left_out", ["--experiment", "--trial"])
def test_the_experiment_and_the_trial_are_required(left_out: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    profile.add_parser(parser.add_subparsers())
    argv = ["profile", "--experiment", "e", "--trial", "t"]
    at = argv.index(left_out)
    with pytest.raises(SystemExit):
        parser.parse_args(argv[:at] + argv[at + 2:])
    assert f"the following arguments are required: {left_out}" in capsys.readouterr().err


def test_a_capture_that_started_then_was_dropped_says_both_and_exits_1(
        tmp_path: Path, turns: Callable[[list[Callable[[], None]]], list[float]],
        capsys: pytest.CaptureFixture[str]) -> None:
    """'dropped' sorts before 'started': each change of state is told, whatever its order."""
    path = tmp_path / "a.json"
    answer(path, profile_ack.STARTED, "recording")
    turns([lambda: answer(path, profile_ack.DROPPED, "cannot write the trace")])
    assert profile.answers({"0": path}, 0.0, 60.0) == 1
    assert capsys.readouterr().out == "rank 0: recording\nrank 0: cannot write the trace\n"


def test_a_node_is_this_one_by_its_exact_name_whichever_way_others_sort(
        world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["api"] = api_of([info("0", "200", node=HERE + "x"), info("1", "201", node="!" + HERE)])
    assert profile.run(args()) == 1
    assert world["sent"] == []
    assert capsys.readouterr().out.count("ask it with:") == 2
