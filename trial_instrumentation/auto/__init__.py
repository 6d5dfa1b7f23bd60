"""Automatic instrumentation of an unmodified training script (``trainwatch run``,
``TRAINWATCH_AUTO=1``; docs/instrumentation.md, "Zero lines: trainwatch run").

``site/sitecustomize.py`` calls :func:`on_torch` once the process has imported torch. It patches
two things, both cheap on the hot path: every DataLoader iterator's ``__next__`` (a clock read on
each side of the fetch, the batch's leading dimension) and torch's global optimizer step hooks;
:mod:`.steps` turns them into steps. The trial itself is made at the first fetch or optimizer
step (a process that imports torch and trains nothing, torchrun's launcher, pushes nothing),
with the names of :mod:`.naming`, and closed at exit with the exit marker an explicit trial
would push. With Lightning's or the Hugging Face ``Trainer``, :mod:`.frameworks` adds
trainwatch's own callback instead and these hooks stand aside: one trial per process.

A ``Trial`` the script makes itself wins: auto stands aside for the rest of the process (a trial
it had started is closed first, so the two never push at once). Any exception in here logs one
warning and disables auto for the process; the script runs on as without it.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from time import perf_counter
from typing import Any

from trial_instrumentation import names

log = logging.getLogger(__name__)


class _Auto:
    """The process's automatic instrumentation: off, ready, timing, or standing aside."""

    def __init__(self) -> None:
        self.ready = False  # torch patched: the hooks may time
        self.off = False  # failed, or standing aside for an explicit trial or a framework
        self.trial: Any = None
        self.steps: Any = None
        self.hot: Any = None  # the steps while timing (the hot path's one check), else None
        self.handles: list[Any] = []
        self.creating = False  # our own Trial is being made (not the script's)
        self.exit_code: object = 0
        self.pid = os.getpid()

    @property
    def active(self) -> bool:
        return self.ready and not self.off

    def fail(self, exc: BaseException) -> None:
        """Any failure: one warning, then nothing more from trainwatch in this process."""
        if self.off:
            return
        self.stand_aside()
        log.warning("trainwatch: automatic instrumentation disabled in this process after an "
                    "error (%s: %s); training goes on untimed", type(exc).__name__, exc)

    def stand_aside(self) -> None:
        self.off = True
        self.hot = None
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        trial, self.trial = self.trial, None
        if trial is not None and os.getpid() == self.pid:
            trial.close(clean=True)

    def start(self) -> None:
        """Make and start the trial, once (``hot`` is then set, unless there is nothing to time
        into)."""
        if self.trial is not None or self.off:
            return
        from trial_instrumentation.auto import naming
        from trial_instrumentation.auto.steps import AutoSteps
        from trial_instrumentation.trial import Trial

        env = os.environ
        experiment, trial_name, where = naming.choose(env, sys.argv)
        self.creating = True
        try:
            trial = Trial(experiment=None if env.get("TRAINWATCH_EXPERIMENT") else experiment,
                          trial=None if env.get("TRAINWATCH_TRIAL") else trial_name)
        finally:
            self.creating = False
        cfg = trial.config
        if not trial.enabled:
            sys.stderr.write("trainwatch: automatic instrumentation is on but no Pushgateway "
                             "is set (TRAINWATCH_PUSHGATEWAY): nothing is timed\n")
            self.stand_aside()
            return
        named = "TRAINWATCH_EXPERIMENT/TRAINWATCH_TRIAL" if env.get(
            "TRAINWATCH_EXPERIMENT") and env.get("TRAINWATCH_TRIAL") else where
        sys.stderr.write(f"trainwatch: timing {sys.argv[0] or 'python'} as experiment "
                         f"{cfg.experiment}, trial {cfg.trial}, rank {cfg.rank} of "
                         f"{cfg.world_size} (names from {named}), "
                         + (f"pushing to {cfg.pushgateway}\n" if cfg.pushgateway
                            else f"serving /metrics on port {cfg.pull_port}\n"))
        self.trial = trial
        self.steps = AutoSteps(trial.step_recorder(),
                               trial.phase(names.DATALOADER_NEXT).histogram.observe,  # type: ignore[union-attr]
                               trial.phase(names.TRAIN_BATCH).histogram.observe)  # type: ignore[union-attr]
        trial.before_close(self._closing)
        trial.start()
        atexit.register(self.close)
        self.hot = self.steps

    def _closing(self) -> None:
        self.hot = None
        self.steps.close()

    def close(self) -> None:
        """At interpreter exit (or after an uncaught exception): the final push, marked clean
        unless the process is failing."""
        trial, self.trial = self.trial, None
        if trial is None or os.getpid() != self.pid:
            return
        code = self.exit_code
        trial.close(clean=code is None or code == 0)


AUTO = _Auto()


def on_torch(torch: Any) -> None:
    """Called by site/sitecustomize.py once ``torch`` has been imported."""
    try:
        _patch_loader(torch)
        _patch_optimizers(torch)
        _watch_explicit_trials()
        _watch_exit()
        os.register_at_fork(after_in_child=_forked)
        AUTO.ready = True
    except Exception as exc:  # noqa: BLE001 - never break the job: one warning, then off
        AUTO.fail(exc)


def on_lightning(module: Any) -> None:
    from trial_instrumentation.auto import frameworks

    frameworks.patch(module.Trainer, "lightning", AUTO)


def on_transformers(module: Any) -> None:
    from trial_instrumentation.auto import frameworks

    frameworks.patch(module.Trainer, "transformers", AUTO)


def _forked() -> None:
    """A forked child (a DataLoader worker, a job that forks) times nothing: its parent does."""
    AUTO.off = True
    AUTO.hot = None
    AUTO.handles.clear()


def _patch_loader(torch: Any) -> None:
    from torch.utils.data import dataloader

    iterator = dataloader._BaseDataLoaderIter
    original = iterator.__next__

    def __next__(self: Any) -> Any:
        steps = AUTO.hot
        if steps is None and not AUTO.active:
            return original(self)
        started = perf_counter()
        try:
            batch = original(self)
        except StopIteration:
            if steps is not None:
                _safely(steps.exhausted, perf_counter())
            raise
        ended = perf_counter()
        try:
            if steps is None:  # the first fetch: the trial begins
                AUTO.start()
                if (steps := AUTO.hot) is None:
                    return batch
            steps.fetched(started, ended, batch)
        except Exception as exc:  # noqa: BLE001 - never break the job: one warning, then off
            AUTO.fail(exc)
        return batch

    iterator.__next__ = __next__  # type: ignore[method-assign]


def _patch_optimizers(torch: Any) -> None:
    from torch.optim import optimizer

    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:
        log.warning("trainwatch: this torch has no global optimizer step hooks: steps are "
                    "counted per fetched batch")
        return

    def stepped(opt: Any, args: Any, kwargs: Any) -> None:
        steps = AUTO.hot
        if steps is None and not AUTO.active:
            return
        try:
            if steps is None:  # the first optimizer step before any fetch: the trial begins
                AUTO.start()
                if (steps := AUTO.hot) is None:
                    return
            steps.optimizer_stepped(opt)
        except Exception as exc:  # noqa: BLE001 - never break the job: one warning, then off
            AUTO.fail(exc)

    AUTO.handles.append(register(stepped))


def _safely(function: Any, *args: Any) -> None:
    try:
        function(*args)
    except Exception as exc:  # noqa: BLE001 - never break the job: one warning, then off
        AUTO.fail(exc)


def _watch_explicit_trials() -> None:
    """A Trial the script (or a callback it added) makes: auto stands aside before it."""
    from trial_instrumentation.trial import Trial

    original = Trial.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not AUTO.creating and not AUTO.off:
            AUTO.stand_aside()
        original(self, *args, **kwargs)

    Trial.__init__ = __init__  # type: ignore[method-assign]


def _watch_exit() -> None:
    """Remember how the process ends, for the exit marker: an uncaught exception closes the trial
    as failed at once; ``sys.exit(code)`` is remembered for the close at exit."""
    hook = sys.excepthook
    exit_any: Any = sys.exit

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        AUTO.exit_code = 1
        try:
            AUTO.close()
        finally:
            hook(kind, value, tb)

    def exit(code: object = None) -> None:
        AUTO.exit_code = code
        exit_any(code)

    sys.excepthook, sys.exit = excepthook, exit  # type: ignore[assignment]
