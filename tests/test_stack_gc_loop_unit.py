"""trainwatch.stack.gc_loop without a Pushgateway: gc.run faked (what it returns and prints),
the clock and the stop event faked, signal handlers recorded instead of installed. What the
status file keeps, what the log gets and when, and how the loop runs and ends."""

from __future__ import annotations

import argparse
import runpy
import signal
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trainwatch import gc
from trainwatch.stack import gc_loop
from trainwatch.stack.gc_loop import Pass


def test_a_pass_saves_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "gc.json"
    Pass(1_700_000_123.25, 2, 45.5).save(path)
    assert Pass.load(path) == Pass(1_700_000_123.25, 2, 45.5)
    assert path.read_text().endswith("}\n") and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"at": 1, "exit": 0}',
                                  '{"at": "x", "exit": 0, "every": 1}',
                                  '{"at": 1, "exit": null, "every": 1}'])
def test_a_status_file_that_cannot_be_read_is_none(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gc.json"
    path.write_text(text)
    assert Pass.load(path) is None
    assert Pass.load(tmp_path / "none.json") is None


def test_gc_args_are_gcs_own_parse() -> None:
    args = gc_loop.gc_args(["--pushgateway", "http://p:1", "--max-age", "2h"])
    assert (args.command, args.pushgateway, args.max_age, args.dry_run) == \
        ("gc", "http://p:1", 7200.0, False)
    assert args.ended_after == gc.ENDED_AFTER
    with pytest.raises(SystemExit):
        gc_loop.gc_args(["--max-age", "soon"])


class FakeGc:
    def __init__(self, code: int, out: str = "", err: str = "") -> None:
        self.code, self.out, self.err = code, out, err
        self.args: list[argparse.Namespace] = []

    def __call__(self, args: argparse.Namespace) -> int:
        self.args.append(args)
        sys.stdout.write(self.out)
        sys.stderr.write(self.err)
        return self.code


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    fake = SimpleNamespace(now=1_700_000_000.75)
    monkeypatch.setattr(gc_loop, "time", SimpleNamespace(
        time=lambda: fake.now, gmtime=lambda: time.gmtime(fake.now), strftime=time.strftime))
    return fake


def test_a_quiet_successful_pass_prints_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        clock: SimpleNamespace) -> None:
    fake = FakeGc(gc.EXIT_OK, err="a warning on stderr\n")
    monkeypatch.setattr(gc, "run", fake)
    args = argparse.Namespace(x=1)
    assert gc_loop.one_pass(args) == gc.EXIT_OK
    assert fake.args == [args]
    assert capsys.readouterr() == ("", "")


def test_a_pass_that_deleted_prints_all_it_said_stamped(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        clock: SimpleNamespace) -> None:
    monkeypatch.setattr(gc, "run", FakeGc(gc.EXIT_OK, out="deleted a\ndeleted b\n",
                                          err="1 group(s) deleted\n"))
    assert gc_loop.one_pass(argparse.Namespace()) == gc.EXIT_OK
    out, err = capsys.readouterr()
    assert err == "" and out == ("2023-11-14T22:13:20Z deleted a\n"
                                 "2023-11-14T22:13:20Z deleted b\n"
                                 "2023-11-14T22:13:20Z 1 group(s) deleted\n")


@pytest.mark.parametrize("code", [1, 2, -1])
def test_a_failing_pass_prints_its_errors_stamped(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        clock: SimpleNamespace, code: int) -> None:
    monkeypatch.setattr(gc, "run", FakeGc(code, err="cannot reach\n"))
    assert gc_loop.one_pass(argparse.Namespace()) == code
    assert capsys.readouterr() == ("2023-11-14T22:13:20Z cannot reach\n", "")


class Stop:
    """The loop's stop event: stops after ``passes`` waits, each wait recorded."""

    def __init__(self, passes: int) -> None:
        self.passes, self.waits, self.stopped = passes, [], False

    def is_set(self) -> bool:
        return self.stopped

    def set(self) -> None:
        self.stopped = True

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) >= self.passes:
            self.stopped = True


def _loop(monkeypatch: pytest.MonkeyPatch, passes: int, codes: list[int]) -> tuple[Stop, dict[int, Any], list[argparse.Namespace]]:
    stop = Stop(passes)
    handlers: dict[int, Any] = {}
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(gc_loop.threading, "Event", lambda: stop)
    monkeypatch.setattr(gc_loop.signal, "signal", lambda signum, handler: handlers.update({signum: handler}))
    answers = iter(codes)

    def one_pass(args: argparse.Namespace) -> int:
        seen.append(args)
        return next(answers)

    monkeypatch.setattr(gc_loop, "one_pass", one_pass)
    return stop, handlers, seen


def test_the_loop_passes_every_interval_saving_each_pass(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        clock: SimpleNamespace, tmp_path: Path) -> None:
    stop, handlers, seen = _loop(monkeypatch, 2, [1, 0])
    status = tmp_path / "gc.json"
    saved: list[Pass | None] = []
    real_wait = stop.wait

    def wait(seconds: float) -> None:
        saved.append(Pass.load(status))
        clock.now += seconds
        real_wait(seconds)

    stop.wait = wait  # type: ignore[method-assign]
    assert gc_loop.main(["--every", "90s", "--status", str(status), "--",
                         "--pushgateway", "http://p:1", "--dry-run"]) == 0
    assert capsys.readouterr().out == "trainwatch gc --pushgateway http://p:1 --dry-run every 90 s\n"
    assert saved == [Pass(1_700_000_000.75, 1, 90.0), Pass(1_700_000_090.75, 0, 90.0)]
    assert stop.waits == [90.0, 90.0]
    assert [(a.pushgateway, a.dry_run) for a in seen] == [("http://p:1", True)] * 2
    assert set(handlers) == {signal.SIGINT, signal.SIGTERM}


def test_a_signal_ends_the_loop_before_its_next_pass(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        clock: SimpleNamespace, tmp_path: Path) -> None:
    stop, handlers, seen = _loop(monkeypatch, 99, [0, 0, 0])
    real_wait = stop.wait

    def wait(seconds: float) -> None:
        real_wait(seconds)
        if len(stop.waits) == 2:
            handlers[max(handlers)](15, None)  # SIGTERM during the second wait

    stop.wait = wait  # type: ignore[method-assign]
    assert gc_loop.main(["--every", "1.5s", "--status", str(tmp_path / "s.json")]) == 0
    assert len(seen) == 2 and seen[0].max_age == 3600.0 and seen[0].pushgateway is None
    assert capsys.readouterr().out == "trainwatch gc  every 1.5 s\n"
    stop.stopped = False
    handlers[min(handlers)](2, None)  # SIGINT stops it too
    assert stop.stopped


@pytest.mark.parametrize("argv", [["--status", "s.json"], ["--every", "30s"],
                                  ["--every", "0s", "--status", "s.json"],
                                  ["--every", "30s", "--status", "s.json", "--", "--job"],
                                  # without "--", what follows is gc's all the same
                                  ["--every", "30s", "--status", "s.json", "x"],
                                  ["--every", "30s", "--status", "s.json", "!"]])
def test_the_loop_refuses_a_bad_command_line(argv: list[str], capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _loop(monkeypatch, 1, [0])
    with pytest.raises(SystemExit) as exit_:
        gc_loop.main(argv)
    assert exit_.value.code == 2


def test_a_pass_is_a_value() -> None:
    last = Pass(1.5, 0, 30.0)
    assert {last, Pass(1.5, 0, 30.0)} == {last}
    with pytest.raises(AttributeError):
        last.exit = 1  # type: ignore[misc]


def test_every_line_is_flushed_at_once_into_the_log(
        monkeypatch: pytest.MonkeyPatch, clock: SimpleNamespace, tmp_path: Path) -> None:
    printed: list[tuple[str, bool]] = []
    monkeypatch.setattr(gc_loop, "print", lambda text, flush=False: printed.append((text, flush)),
                        raising=False)
    monkeypatch.setattr(gc, "run", FakeGc(1, err="cannot reach\n"))
    gc_loop.one_pass(argparse.Namespace())
    _loop(monkeypatch, 1, [0])
    gc_loop.main(["--every", "30s", "--status", str(tmp_path / "s.json")])
    assert printed == [("2023-11-14T22:13:20Z cannot reach", True),
                       ("trainwatch gc  every 30 s", True)]


def test_the_module_runs_its_main(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["gc_loop", "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_:
        warnings.simplefilter("ignore")  # runpy: the module is imported already
        runpy.run_module("trainwatch.stack.gc_loop", run_name="__main__")
    assert exit_.value.code == 0 and "run `trainwatch gc` every interval" in capsys.readouterr().out
