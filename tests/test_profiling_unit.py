"""The on-demand profiler (trial_instrumentation/profiling.py) driven directly, step boundary
by step boundary: real ``torch.profiler`` captures of a tiny CPU model, a real signal sent to
this process, a real trigger file, and the answers ``trainwatch profile`` reads. The
training-process runs are tests/test_trial_profiling.py."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trial_instrumentation import config, names, profile_ack, profiling
from trial_instrumentation.profiling import (
    KINETO_QUIET,
    MAX_SECONDS,
    NEVER,
    WARMUP_STEPS,
    OnDemandProfiler,
    StepBoundary,
    part_of,
)

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerAction, ProfilerActivity

LOGGER = "trial_instrumentation.profiling"


@pytest.fixture(autouse=True)
def answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The by-pid answers go under the test's own directory."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    return profile_ack.by_pid(os.getpid())


def settings(tmp_path: Path, **profile: Any) -> config.TrialConfig:
    cfg = config.resolve(experiment="prof-unit", trial="t1", pull_port=0, rank=3, world_size=4)
    given = {"directory": str(tmp_path / "traces"), "signal": None, "steps": 3, **profile}
    return dataclasses.replace(cfg, profile=dataclasses.replace(cfg.profile, **given))


class Profiled:
    """An OnDemandProfiler over a tiny model, the trial's step count and its summaries."""

    def __init__(self, tmp_path: Path, **profile: Any) -> None:
        self.cfg = settings(tmp_path, **profile)
        self.done = 10
        self.written: list[Any] = []
        self.profiler = OnDemandProfiler(self.cfg, lambda: self.done, self.written.append)
        self.model = torch.nn.Linear(8, 4)

    def steps(self, count: int) -> None:
        """``count`` training steps, each ended at a step boundary as the recorder does."""
        for _ in range(count):
            self.model(torch.randn(2, 8)).sum().backward()
            self.done += 1
            if self.profiler.armed:
                self.profiler.step_ended()


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def answer(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    del doc["at"], doc["pid"]
    return doc


def trace_steps(path: str | Path) -> list[str]:
    with gzip.open(path, "rt") as file:
        events = json.load(file)["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


# A capture, from request to trace ----------------------------------------------------------

def test_a_request_captures_the_next_steps_after_the_warm_up_and_says_each_turn(
        tmp_path: Path, answers: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 891_000, tzinfo=UTC).timestamp()
    monkeypatch.setattr(profiling, "time", SimpleNamespace(
        time=lambda: at, strftime=time.strftime, gmtime=time.gmtime, monotonic=time.monotonic))
    run = Profiled(tmp_path)
    assert not run.profiler.armed
    run.steps(2)  # nothing asked: nothing done
    assert not (tmp_path / "traces").exists()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        run.profiler.request(2, "a call")
        assert run.profiler.armed
        run.steps(1)  # step 13's boundary starts it: steps 16, 17 after 2 of warm-up
        path = tmp_path / "traces" / "prof-unit" / "t1" / "rank3-20260304T050607.891.pt.trace.json.gz"
        assert said(caplog) == [(logging.INFO, (f"trainwatch: profiling steps 16-17 (asked by a "
                                               f"call) into {path}"))]
        assert answer(answers) == {"state": "started", "steps": "16-17", "path": str(path),
                                   "message": said(caplog)[0][1][len("trainwatch: "):]}
        assert part_of(path).exists() and not path.exists()
        assert run.profiler.armed
        run.steps(3)  # two of warm-up and the first recorded: not complete
        assert run.written == [] and not path.exists()
        run.profiler.request(5, "signal SIGUSR2")  # while it runs: refused, it goes on
        run.steps(1)
        assert said(caplog)[1] == (logging.WARNING, ("trainwatch: profile request (signal "
                                   "SIGUSR2) refused: a capture of steps 16-17 is running"))
        assert answer(answers)["state"] == "written"  # the refusal came first, then the write
        assert run.profiler.armed is False
    [summary] = run.written
    assert (summary.path, summary.first_step, summary.steps) == (str(path), 16, 2)
    assert path.exists() and not part_of(path).exists()
    assert trace_steps(path) == ["ProfilerStep#16", "ProfilerStep#17"]
    assert said(caplog)[2] == (logging.INFO, (f"trainwatch: profile of steps 16-17 written to "
                                             f"{path}"))
    assert answer(answers) == {"state": "written", "steps": "16-17", "path": str(path),
                               "message": said(caplog)[2][1][len("trainwatch: "):]}
    assert len(said(caplog)) == 3  # complete: no "cut short"
    run.steps(3)  # after it: nothing more
    assert len(run.written) == 1


def test_the_refusal_is_answered_with_the_running_captures_steps(
        tmp_path: Path, answers: Path) -> None:
    run = Profiled(tmp_path, steps=4)
    run.profiler.request(None, "a call")  # the configured 4 steps
    run.steps(1)
    run.profiler.request(2, "trigger file x")
    run.steps(1)
    assert answer(answers) == {
        "state": "refused", "steps": "14-17",
        "message": "profile request (trigger file x) refused: a capture of steps 14-17 is "
                   "running"}
    run.steps(6)
    assert [s.steps for s in run.written] == [4]


def test_the_trials_end_writes_a_running_capture_with_the_steps_it_has(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = Profiled(tmp_path)
    run.profiler.request(3, "a call")
    run.steps(4)  # started, two of warm-up, one recorded
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.profiler.close()
    assert said(caplog) == [(logging.WARNING, ("trainwatch: profile cut short (the trial "
                                              "ended): 1 of 3 steps recorded"))]
    [summary] = run.written
    assert (summary.first_step, summary.steps) == (14, 1)
    assert trace_steps(summary.path) == ["ProfilerStep#14", "ProfilerStep#15"]
    assert not run.profiler.armed
    run.profiler.close()  # again: nothing more
    assert len(run.written) == 1


def test_a_capture_of_slow_steps_stops_at_its_time_limit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(profiling, "time", SimpleNamespace(
        time=time.time, strftime=time.strftime, gmtime=time.gmtime, monotonic=lambda: clock[0]))
    run = Profiled(tmp_path)
    run.profiler.request(3, "a call")
    run.steps(3)  # started, the warm-up
    clock[0] += MAX_SECONDS  # the limit itself: not past it
    run.steps(1)
    assert run.written == []
    clock[0] += 0.25
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.steps(1)
    assert said(caplog) == [(logging.WARNING, ("trainwatch: profile cut short (it ran past "
                                              "120s): 2 of 3 steps recorded"))]
    assert [s.steps for s in run.written] == [2]


def test_the_capture_counts_its_steps_from_the_trials(tmp_path: Path) -> None:
    capture = profiling._Capture(tmp_path / "a.pt.trace.json.gz", 3, 21)
    try:
        assert capture.profiler.activities == {ProfilerActivity.CPU}  # no GPU here
        assert capture.profiler.step_num == 21 - WARMUP_STEPS
        assert capture.part == tmp_path / ".a.pt.trace.json.gz.part.gz"
        assert capture.step_range == "21-23"
        schedule = capture.profiler.schedule
        assert [schedule(k) for k in range(18, 26)] == [
            ProfilerAction.WARMUP, ProfilerAction.WARMUP, ProfilerAction.WARMUP,
            ProfilerAction.RECORD, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE,
            ProfilerAction.NONE, ProfilerAction.NONE]
        recorded = []
        for _ in range(6):
            recorded.append((capture.recorded, capture.step()))
        # Warm-up steps record nothing; the fifth boundary completes it; never more than 3.
        assert recorded == [(0, False), (0, False), (0, False), (1, False), (2, True),
                            (3, True)]
        assert capture.recorded == 3
    finally:
        capture.profiler.stop()


def test_one_step_capture_saves_at_its_only_step(tmp_path: Path) -> None:
    capture = profiling._Capture(tmp_path / "b.pt.trace.json.gz", 1, 7)
    try:
        schedule = capture.profiler.schedule
        assert [schedule(k) for k in (5, 6, 7, 8)] == [
            ProfilerAction.WARMUP, ProfilerAction.WARMUP, ProfilerAction.RECORD_AND_SAVE,
            ProfilerAction.NONE]
        assert capture.step_range == "7-7"
    finally:
        capture.profiler.stop()


def test_kinetos_start_up_lines_are_quieted_unless_the_trial_chose(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kineto's own variable (libkineto reads KINETO_LOG_LEVEL; 6 is above its levels).
    variable = "KINETO_LOG_LEVEL"
    monkeypatch.delenv(variable, raising=False)
    profiling._Capture(tmp_path / "c.pt.trace.json.gz", 1, 1).profiler.stop()
    assert os.environ[variable] == KINETO_QUIET[1]
    monkeypatch.setenv(variable, "2")
    profiling._Capture(tmp_path / "d.pt.trace.json.gz", 1, 1).profiler.stop()
    assert os.environ[variable] == "2"


def test_part_of_is_hidden_beside_the_trace_and_still_gzip() -> None:
    assert part_of(Path("/r/e/t/rank0-x.pt.trace.json.gz")) == \
        Path("/r/e/t/.rank0-x.pt.trace.json.gz.part.gz")


# Requests that cannot be served -----------------------------------------------------------------

def test_an_unwritable_directory_drops_the_request_and_says_why(
        tmp_path: Path, answers: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a-file").touch()
    run = Profiled(tmp_path, directory=str(tmp_path / "a-file" / "traces"))
    run.profiler.request(2, "a call")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.steps(1)
    [(level, message)] = said(caplog)
    assert level == logging.WARNING
    assert message.startswith("trainwatch: profile request (a call) dropped: cannot write "
                              f"{tmp_path}/a-file/traces/prof-unit/t1/rank3-")
    assert message.endswith(f"training goes on ({names.ENV_PROFILE_DIR} picks the directory)")
    assert answer(answers) == {"state": "dropped", "message": message[len("trainwatch: "):]}
    assert not run.profiler.armed
    run.steps(6)
    assert run.written == [] and len(said(caplog)) == 1


def test_without_torch_the_request_is_dropped_and_leaves_no_file(
        tmp_path: Path, answers: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = Profiled(tmp_path)
    run.profiler.request(2, "a call")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # import torch fails
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.profiler.step_ended()
    assert said(caplog) == [(logging.WARNING, ("trainwatch: profile request (a call) dropped: "
                                              "torch is not installed"))]
    assert answer(answers) == {"state": "dropped",
                               "message": "profile request (a call) dropped: torch is not "
                                          "installed"}
    folder = tmp_path / "traces" / "prof-unit" / "t1"
    assert list(folder.iterdir()) == []
    assert not run.profiler.armed


def test_a_request_after_the_last_step_is_dropped_at_close(
        tmp_path: Path, answers: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = Profiled(tmp_path)
    run.steps(2)
    run.profiler.request(2, "signal SIGUSR2")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.profiler.close()
    message = "profile request (signal SIGUSR2) came after the last step; no trace"
    assert said(caplog) == [(logging.WARNING, f"trainwatch: {message}")]
    assert answer(answers) == {"state": "dropped", "message": message}
    assert not run.profiler.armed and run.profiler._pending is None
    assert not (tmp_path / "traces").exists()


def test_a_close_with_nothing_asked_says_nothing(tmp_path: Path, answers: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    run = Profiled(tmp_path)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        run.profiler.close()
    assert said(caplog) == [] and not answers.exists()


class Surprise(Exception):
    """An exception no narrower ``except`` clause would name: whatever fails, training goes on."""


def test_a_failure_at_a_boundary_is_logged_and_training_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def broken(summary: Any) -> None:
        raise Surprise("gateway gone")

    run = Profiled(tmp_path)
    run.profiler = OnDemandProfiler(run.cfg, lambda: run.done, broken)
    run.profiler.request(1, "a call")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run.steps(4)
    assert said(caplog) == [(logging.ERROR, "trainwatch: profiling failed; training goes on")]
    assert not run.profiler.armed
    assert run.profiler._capture is None and run.profiler._pending is None
    run.profiler.request(1, "a call")  # and it can be asked again
    assert run.profiler.armed


def test_a_failure_writing_at_close_is_logged_and_the_close_completes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def broken(summary: Any) -> None:
        raise RuntimeError("disk full")

    run = Profiled(tmp_path, signal=signal.SIGUSR2)
    run.profiler = OnDemandProfiler(run.cfg, lambda: run.done, broken)
    previous = signal.getsignal(signal.SIGUSR2)
    run.profiler.install()
    run.profiler.request(3, "a call")
    run.steps(2)
    run.profiler.request(1, "a call")  # pending when the trial ends
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run.profiler.close()
    assert said(caplog) == [(logging.ERROR, "trainwatch: writing the profile at exit failed")]
    assert not run.profiler.armed and run.profiler._pending is None
    assert signal.getsignal(signal.SIGUSR2) == previous  # uninstalled all the same


# Asking: the call, the signal, the trigger file ---------------------------------------------------

def test_a_request_takes_its_steps_or_the_configured_ones(tmp_path: Path) -> None:
    profiler = OnDemandProfiler(settings(tmp_path, steps=7), lambda: 0, lambda s: None)
    profiler.request()
    assert profiler._pending == (7, "a call") and profiler.armed
    profiler.request(2, "signal SIGUSR2")
    assert profiler._pending == (2, "signal SIGUSR2")


@pytest.fixture
def user_handler() -> Iterator[list[int]]:
    """The training script's own SIGUSR2 handler, there before the trial."""
    heard: list[int] = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: heard.append(signum))
    yield heard
    signal.signal(signal.SIGUSR2, before)


def test_the_signal_asks_and_the_users_handler_still_runs_once(
        tmp_path: Path, user_handler: list[int]) -> None:
    user = signal.getsignal(signal.SIGUSR2)
    profiler = OnDemandProfiler(settings(tmp_path, signal=signal.SIGUSR2), lambda: 0,
                                lambda s: None)
    profiler.install()
    profiler.install()  # twice (a second start): still chained to the user's, once
    assert signal.getsignal(signal.SIGUSR2) == profiler._on_signal
    os.kill(os.getpid(), signal.SIGUSR2)
    assert profiler._pending == (3, "signal SIGUSR2") and profiler.armed
    assert user_handler == [signal.SIGUSR2]
    profiler.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is user
    profiler.uninstall()  # again: nothing
    assert signal.getsignal(signal.SIGUSR2) is user
    profiler.install()  # a trial started again: chained again
    assert signal.getsignal(signal.SIGUSR2) == profiler._on_signal
    profiler.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is user


def test_a_default_or_ignored_previous_handler_is_not_called(tmp_path: Path) -> None:
    before = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        profiler = OnDemandProfiler(settings(tmp_path, signal=signal.SIGUSR2), lambda: 0,
                                    lambda s: None)
        profiler.install()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert profiler.armed
        profiler.uninstall()
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_handler_put_in_after_ours_is_left_by_uninstall(
        tmp_path: Path, user_handler: list[int]) -> None:
    profiler = OnDemandProfiler(settings(tmp_path, signal=signal.SIGUSR2), lambda: 0,
                                lambda s: None)
    profiler.install()

    def later(signum: int, frame: Any) -> None:
        return None

    signal.signal(signal.SIGUSR2, later)
    profiler.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is later


def test_off_the_main_thread_no_handler_is_put_in_or_taken_out(
        tmp_path: Path, user_handler: list[int]) -> None:
    user = signal.getsignal(signal.SIGUSR2)
    profiler = OnDemandProfiler(settings(tmp_path, signal=signal.SIGUSR2), lambda: 0,
                                lambda s: None)

    def in_a_thread(call: Any) -> None:
        raised: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                raised.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        assert raised == []

    in_a_thread(profiler.install)
    assert signal.getsignal(signal.SIGUSR2) is user
    profiler.install()
    in_a_thread(profiler.uninstall)
    assert signal.getsignal(signal.SIGUSR2) == profiler._on_signal
    profiler.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is user


def test_no_signal_configured_leaves_the_signal_alone(
        tmp_path: Path, user_handler: list[int]) -> None:
    user = signal.getsignal(signal.SIGUSR2)
    profiler = OnDemandProfiler(settings(tmp_path, signal=None), lambda: 0, lambda s: None)
    profiler.install()
    assert signal.getsignal(signal.SIGUSR2) is user
    profiler.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is user


def touch(path: Path, text: str, when: int) -> None:
    """Write ``text`` into ``path`` and set its modification time to ``when`` (ns), so two
    writes within the file system's clock tick still differ."""
    path.write_text(text)
    os.utime(path, ns=(when, when))


def test_a_changed_trigger_file_asks_with_its_steps_once_per_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trigger = tmp_path / "trigger"
    touch(trigger, "", 1_000_000_000)
    profiler = OnDemandProfiler(settings(tmp_path, trigger=str(trigger)), lambda: 0,
                                lambda s: None)
    profiler.poll_trigger()  # not installed yet: nothing noted, nothing asked
    assert not profiler.armed
    profiler.install()
    profiler.poll_trigger()  # unchanged since the trial started
    assert not profiler.armed
    touch(trigger, "4", 2_000_000_000)
    profiler.install()  # a second start: the baseline stays the first
    profiler.poll_trigger()
    assert profiler._pending == (4, f"trigger file {trigger}")
    profiler._pending, profiler.armed = None, False
    profiler.poll_trigger()  # the same change: once
    assert not profiler.armed
    touch(trigger, "", 3_000_000_000)  # touched, empty: the configured steps
    profiler.poll_trigger()
    assert profiler._pending == (3, f"trigger file {trigger}")
    touch(trigger, "", 3_000_000_000)  # the same time and size: no change
    profiler._pending, profiler.armed = None, False
    profiler.poll_trigger()
    assert not profiler.armed
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        touch(trigger, "lots", 4_000_000_000)
        profiler.poll_trigger()
    assert profiler._pending == (3, f"trigger file {trigger}")
    [(level, message)] = said(caplog)
    assert level == logging.WARNING
    assert message.startswith(f"trainwatch: profile trigger {trigger}: ")
    assert message.endswith("; recording the default 3 steps")
    trigger.unlink()  # gone: no request
    profiler._pending, profiler.armed = None, False
    profiler.poll_trigger()
    assert not profiler.armed


def test_a_trigger_file_made_after_the_start_asks(tmp_path: Path) -> None:
    trigger = tmp_path / "later"
    profiler = OnDemandProfiler(settings(tmp_path, trigger=str(trigger)), lambda: 0,
                                lambda s: None)
    profiler.install()
    profiler.poll_trigger()
    assert not profiler.armed
    touch(trigger, "2", 5_000_000_000)
    profiler.poll_trigger()
    assert profiler._pending == (2, f"trigger file {trigger}")


def test_a_trigger_that_cannot_be_read_asks_for_the_default_steps(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trigger = tmp_path / "trigger"
    profiler = OnDemandProfiler(settings(tmp_path, trigger=str(trigger)), lambda: 0,
                                lambda s: None)
    profiler.install()
    trigger.mkdir()  # a directory: stat works, reading fails
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        profiler.poll_trigger()
    assert profiler._pending == (3, f"trigger file {trigger}")
    assert "Is a directory" in said(caplog)[0][1]


def test_without_a_trigger_file_polling_does_nothing(tmp_path: Path) -> None:
    profiler = OnDemandProfiler(settings(tmp_path), lambda: 0, lambda s: None)
    profiler.install()
    assert profiler._baseline is None
    profiler.poll_trigger()
    assert not profiler.armed


def test_answers_go_by_pid_and_beside_a_watched_trigger_file(
        tmp_path: Path, answers: Path) -> None:
    trigger = tmp_path / "trigger"
    run = Profiled(tmp_path, trigger=str(trigger))
    run.profiler.request(1, "a call")
    run.profiler.close()
    beside = profile_ack.beside(trigger, 3)
    assert answer(beside) == answer(answers) == {
        "state": "dropped", "message": "profile request (a call) came after the last step; "
                                       "no trace"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = Profiled(elsewhere)
    run.profiler.request(1, "a call")
    run.profiler.close()
    assert sorted(p.name for p in elsewhere.iterdir()) == []


def test_the_step_path_of_a_loop_without_a_profiler_is_never_armed() -> None:
    assert isinstance(NEVER, StepBoundary) and NEVER.armed is False
    assert NEVER.step_ended() is None
    assert StepBoundary().armed is False


# The edges: a complete capture longer than the warm-up, a trigger file set back or shrunk, a
# trigger file made after the start at any time, the part already gone when torch is missing ---

@pytest.mark.parametrize("steps", [1, 3, 5])
def test_a_complete_capture_of_any_length_is_not_cut_short(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, steps: int) -> None:
    run = Profiled(tmp_path)
    run.profiler.request(steps, "a call")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.steps(1 + WARMUP_STEPS + steps)  # started, warmed up, every step recorded
    [summary] = run.written
    assert summary.steps == steps
    assert said(caplog) == []  # nothing cut: no warning


@pytest.mark.parametrize(("first", "then"), [
    ((5_000_000_000, "12"), (4_000_000_000, "12")),  # set back in time: a change
    ((5_000_000_000, "12"), (5_000_000_000, "2")),  # the same time, shorter: a change
    ((5_000_000_000, "2"), (5_000_000_000, "12")),  # the same time, longer: a change
])
def test_any_change_of_the_trigger_files_time_or_size_asks(
        tmp_path: Path, first: tuple[int, str], then: tuple[int, str]) -> None:
    trigger = tmp_path / "trigger"
    touch(trigger, first[1], first[0])
    profiler = OnDemandProfiler(settings(tmp_path, trigger=str(trigger)), lambda: 0,
                                lambda s: None)
    profiler.install()
    touch(trigger, then[1], then[0])
    profiler.poll_trigger()
    assert profiler._pending == (int(then[1]), f"trigger file {trigger}")


@pytest.mark.parametrize(("when", "text"), [(1, ""), (0, "2"), (1, "2"), (-1, ""),
                                            (5_000_000_000, "")])
def test_a_trigger_file_made_after_the_start_asks_whatever_its_time(
        tmp_path: Path, when: int, text: str) -> None:
    trigger = tmp_path / "later"
    profiler = OnDemandProfiler(settings(tmp_path, trigger=str(trigger)), lambda: 0,
                                lambda s: None)
    profiler.install()
    touch(trigger, text, when)
    assert os.stat(trigger).st_mtime_ns == when
    profiler.poll_trigger()
    assert profiler._pending == (int(text or 3), f"trigger file {trigger}")


def test_without_torch_a_part_already_gone_is_still_a_quiet_drop(
        tmp_path: Path, answers: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "traces" / "prof-unit" / "t1"

    def steps_done() -> int:  # the folder emptied (a cleaner) while the request is handled
        for part in folder.iterdir():
            part.unlink()
        return 10

    profiler = OnDemandProfiler(settings(tmp_path), steps_done, lambda s: None)
    profiler.request(2, "a call")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # import torch fails
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        profiler.step_ended()
    assert said(caplog) == [(logging.WARNING, ("trainwatch: profile request (a call) dropped: "
                                              "torch is not installed"))]
    assert answer(answers)["state"] == "dropped"
    assert list(folder.iterdir()) == [] and not profiler.armed


def test_a_second_capture_goes_beside_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    clock = iter([1_772_600_000.125, 1_772_600_060.5])  # two requests a minute apart
    monkeypatch.setattr(profiling, "time", SimpleNamespace(
        time=lambda: next(clock), strftime=time.strftime, gmtime=time.gmtime,
        monotonic=time.monotonic))
    run = Profiled(tmp_path)
    for _ in range(2):
        run.profiler.request(1, "a call")
        run.steps(1 + WARMUP_STEPS + 1)
    folder = tmp_path / "traces" / "prof-unit" / "t1"
    assert [Path(s.path).parent for s in run.written] == [folder, folder]
    assert sorted(p.name for p in folder.iterdir()) == [
        "rank3-20260304T045320.125.pt.trace.json.gz", "rank3-20260304T045420.500.pt.trace.json.gz"]


def test_a_long_capture_saves_at_its_last_step(tmp_path: Path) -> None:
    # 300 steps: past the small numbers Python keeps one object each of, so the schedule
    # compares the step's value, not its identity.
    capture = profiling._Capture(tmp_path / "c.pt.trace.json.gz", 300, 1_001)
    try:
        schedule = capture.profiler.schedule
        assert [schedule(k) for k in (999, 1_000, 1_001, 1_299, 1_300, 1_301)] == [
            ProfilerAction.WARMUP, ProfilerAction.WARMUP, ProfilerAction.RECORD,
            ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE]
        assert capture.step_range == "1001-1300"
    finally:
        capture.profiler.stop()


def test_a_complete_capture_of_300_steps_is_not_cut_short(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = Profiled(tmp_path)
    run.profiler.request(300, "a call")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.steps(1 + WARMUP_STEPS + 300)
    assert [s.steps for s in run.written] == [300]
    assert said(caplog) == []
