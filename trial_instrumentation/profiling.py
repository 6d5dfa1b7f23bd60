"""A ``torch.profiler`` trace of a running trial's next steps, captured when asked.

Asking only sets a flag: a signal (``SIGUSR2`` by default, chained to the handler that was
there), a change of the trigger file (``TRAINWATCH_PROFILE_TRIGGER``, checked by the pusher
thread when it collects), ``trainwatch profile`` or :meth:`Trial.profile`. The step path reads
that one attribute per step (:class:`StepBoundary`); everything else happens at the step
boundary after a request, and its time is kept out of the step histogram. A capture records
``steps`` steps after :data:`WARMUP_STEPS`, stops early after :data:`MAX_SECONDS`, and is written
by :mod:`trial_instrumentation.profile_trace` (cut to ``max_bytes``). Nothing here raises into
the training loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from trial_instrumentation import names, profile_ack
from trial_instrumentation.config import TrialConfig, profile_steps

log = logging.getLogger(__name__)
WARMUP_STEPS = 2  # the profiler's own start-up distorts the first steps it sees
MAX_SECONDS = 120.0  # a capture of slow steps stops here, with what it has
# Kineto (torch.profiler's C++ side) prints "USDT: ... profiler_start" / "profiler_stop" (and its
# "STAGE:" lines) on the training script's stderr at each capture; above its levels it prints
# nothing. Set before the first capture, unless the trial set it.
KINETO_QUIET = ("KINETO_LOG_LEVEL", "6")


class StepBoundary:
    """What the step path sees: ``armed`` is False until a request (then ``step_ended``)."""

    __slots__ = ("armed",)

    def __init__(self) -> None:
        self.armed = False

    def step_ended(self) -> None:
        return None


NEVER = StepBoundary()  # for loops with no profiler: never armed


class _Capture:
    """One running ``torch.profiler.profile`` and where its trace goes."""

    def __init__(self, path: Path, steps: int, first_step: int) -> None:
        import torch
        from torch.profiler import ProfilerAction, ProfilerActivity, profile

        os.environ.setdefault(*KINETO_QUIET)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.path, self.steps, self.first_step = path, steps, first_step
        self.part = part_of(path)  # written here, renamed to ``path`` once complete
        self.seen = 0  # step boundaries since the start, warm-up included
        self.deadline = time.monotonic() + MAX_SECONDS
        # torch.profiler.schedule(wait=0, warmup=WARMUP_STEPS, active=steps), counted from the
        # trial's own step number, so the trace's ProfilerStep#k are the trial's steps (1-based).
        offset = first_step - WARMUP_STEPS

        def action(step: int) -> ProfilerAction:
            k = step - offset
            if k < WARMUP_STEPS:
                return ProfilerAction.WARMUP
            if k < WARMUP_STEPS + steps - 1:
                return ProfilerAction.RECORD
            if k == WARMUP_STEPS + steps - 1:
                return ProfilerAction.RECORD_AND_SAVE
            return ProfilerAction.NONE

        self.profiler = profile(activities=activities, schedule=action)
        self.profiler.step_num = offset
        self.profiler.start()

    def step(self) -> bool:
        """One step ended; True when the capture is complete (or out of time)."""
        self.profiler.step()
        self.seen += 1
        return self.seen >= WARMUP_STEPS + self.steps or time.monotonic() > self.deadline

    @property
    def recorded(self) -> int:
        return min(max(self.seen - WARMUP_STEPS, 0), self.steps)

    @property
    def step_range(self) -> str:
        return f"{self.first_step}-{self.first_step + self.steps - 1}"


def part_of(path: Path) -> Path:
    """Where a trace is written before it is renamed to ``path``: hidden, same directory, the
    same ``.gz`` ending (torch compresses by the name), so no empty or half-written file shows
    under the trace's own name."""
    return path.with_name(f".{path.name}.part.gz")


class OnDemandProfiler(StepBoundary):
    """Captures a trace of the next steps on request; one capture at a time.

    ``steps_done`` tells the trial's finished steps (to number the captured ones);
    ``on_written`` receives each written trace's summary.
    """

    __slots__ = ("_baseline", "_capture", "_config", "_on_written", "_pending", "_previous",
                 "_signal_installed", "_steps_done")

    def __init__(self, config: TrialConfig, steps_done: Callable[[], int],
                 on_written: Callable[[Any], None]) -> None:
        super().__init__()
        self._config = config
        self._steps_done = steps_done
        self._on_written = on_written
        self._pending: tuple[int, str] | None = None  # (steps, who asked)
        self._capture: _Capture | None = None
        self._previous: Any = None
        self._signal_installed = False
        self._baseline: tuple[int, int] | None = None  # the trigger file's (mtime, size)

    def request(self, steps: int | None = None, source: str = "a call") -> None:
        """Ask for a capture at the next step boundary (safe from a signal or another thread:
        it only sets attributes; the boundary logs)."""
        self._pending = (steps or self._config.profile.steps, source)
        self.armed = True

    def install(self) -> None:
        """Chain the signal handler (main thread only) and note the trigger file's state."""
        number = self._config.profile.signal
        if (number is not None and not self._signal_installed
                and threading.current_thread() is threading.main_thread()):
            self._previous = signal.getsignal(number)
            signal.signal(number, self._on_signal)
            self._signal_installed = True
        if self._config.profile.trigger and self._baseline is None:
            self._baseline = self._trigger_state() or (0, 0)

    def uninstall(self) -> None:
        number = self._config.profile.signal
        if not self._signal_installed or threading.current_thread() is not threading.main_thread():
            return
        self._signal_installed = False
        if number is not None and signal.getsignal(number) == self._on_signal:
            signal.signal(number, self._previous)

    def poll_trigger(self) -> None:
        """A changed trigger file is a request; its content, if a number, the steps."""
        trigger = self._config.profile.trigger
        if not trigger or self._baseline is None:
            return
        state = self._trigger_state()
        if state is None or state == self._baseline:
            return
        self._baseline = state
        try:
            text = Path(trigger).read_text().strip()
            steps = profile_steps(text) if text else None
        except (OSError, ValueError) as exc:
            log.warning("trainwatch: profile trigger %s: %s; recording the default %d steps",
                        trigger, exc, self._config.profile.steps)
            steps = None
        self.request(steps, f"trigger file {trigger}")

    def step_ended(self) -> None:
        try:
            self._at_boundary()
        except Exception:  # the profiler must never stop training
            log.exception("trainwatch: profiling failed; training goes on")
            self._capture, self._pending, self.armed = None, None, False

    def close(self) -> None:
        """At exit: a running capture is written with the steps it has."""
        try:
            if self._capture is not None:
                self._write("the trial ended")
            elif self._pending is not None:
                said = f"profile request ({self._pending[1]}) came after the last step; no trace"
                log.warning("trainwatch: %s", said)
                self._answer(profile_ack.DROPPED, said)
        except Exception:  # the final push comes next and must not be lost
            log.exception("trainwatch: writing the profile at exit failed")
        self._pending, self.armed = None, False
        self.uninstall()

    def _at_boundary(self) -> None:
        pending, self._pending = self._pending, None
        if self._capture is None:
            if pending is not None:
                self._start(*pending)
            self.armed = self._capture is not None or self._pending is not None
            return
        if pending is not None:
            said = (f"profile request ({pending[1]}) refused: a capture of steps "
                    f"{self._capture.step_range} is running")
            log.warning("trainwatch: %s", said)
            self._answer(profile_ack.REFUSED, said, steps=self._capture.step_range)
        if self._capture.step():
            self._write(None)

    def _start(self, steps: int, source: str) -> None:
        cfg = self._config
        folder = Path(cfg.profile.directory) / cfg.experiment / cfg.trial
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
        path = folder / f"rank{cfg.rank}-{stamp}.pt.trace.json.gz"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            part_of(path).touch()  # can it be written? (hidden: not the trace's name)
        except OSError as exc:
            said = (f"profile request ({source}) dropped: cannot write {path}: {exc}; training "
                    f"goes on ({names.ENV_PROFILE_DIR} picks the directory)")
            log.warning("trainwatch: %s", said)
            self._answer(profile_ack.DROPPED, said)
            return
        try:
            first = self._steps_done() + WARMUP_STEPS + 1
            self._capture = _Capture(path, steps, first)
        except ImportError:
            said = f"profile request ({source}) dropped: torch is not installed"
            log.warning("trainwatch: %s", said)
            self._answer(profile_ack.DROPPED, said)
            part_of(path).unlink(missing_ok=True)
            return
        said = f"profiling steps {self._capture.step_range} (asked by {source}) into {path}"
        log.info("trainwatch: %s", said)
        self._answer(profile_ack.STARTED, said, steps=self._capture.step_range, path=str(path))

    def _write(self, cut: str | None) -> None:
        from trial_instrumentation import profile_trace

        capture, self._capture = self._capture, None
        self.armed = self._pending is not None
        if capture is None:
            return
        capture.profiler.stop()
        if capture.seen < WARMUP_STEPS + capture.steps:
            cut = cut or f"it ran past {MAX_SECONDS:g}s"
            log.warning("trainwatch: profile cut short (%s): %d of %d steps recorded", cut,
                        capture.recorded, capture.steps)
        summary = profile_trace.write(capture.profiler, capture.part, capture.first_step,
                                      capture.recorded, self._config.profile.max_bytes)
        os.replace(capture.part, capture.path)  # complete: now under its own name
        summary = dataclasses.replace(summary, path=str(capture.path))
        self._on_written(summary)
        said = f"profile of steps {summary.step_range} written to {capture.path}"
        log.info("trainwatch: %s", said)
        self._answer(profile_ack.WRITTEN, said, steps=summary.step_range, path=str(capture.path))

    def _answer(self, state: str, message: str, **fields: str) -> None:
        """Tell `trainwatch profile` what became of its request (trial_instrumentation.
        profile_ack): by pid, and beside the trigger file where the trial watches one."""
        cfg = self._config
        paths = [profile_ack.by_pid(os.getpid())]
        if cfg.profile.trigger:
            paths.append(profile_ack.beside(cfg.profile.trigger, cfg.rank))
        profile_ack.write(paths, state, message, **fields)

    def _trigger_state(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self._config.profile.trigger or "")
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request(None, f"signal {signal.Signals(signum).name}")
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
