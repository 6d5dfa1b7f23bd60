"""trial_instrumentation/auto/__init__.py in process: what on_torch installs (the DataLoader
iterator's ``__next__``, torch's global optimizer step hook, the watch for a script's own Trial,
the exit hooks, the fork hook) and what each does while auto is off, ready, timing or standing
aside; the trial it makes at the first fetch or optimizer step, with the names and the line it
says; its close, clean or failed; and one warning, then nothing, after any failure.

Each test gets a fresh ``AUTO`` and puts back whatever on_torch replaced (torch's iterator, the
Trial class, ``sys.excepthook``/``sys.exit``, torch's global hooks). Fork and interpreter exit
are the boundaries: ``os.register_at_fork`` and ``atexit.register`` are recorded, not made."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.optim import optimizer as torch_optimizer
from torch.utils.data import DataLoader, dataloader

from tests.loopback import scripted_server
from trial_instrumentation import auto, names
from trial_instrumentation.auto import _Auto
from trial_instrumentation.auto.steps import AutoSteps
from trial_instrumentation.trial import Trial

WARNING = ("trainwatch: automatic instrumentation disabled in this process after an error "
           "({}); training goes on untimed")


class Broke(Exception):
    """What a step clock raises in these tests: an Exception no narrower ``except`` names (the
    hooks must never break the job, whatever fails)."""


class Steps:
    """What the hooks told the steps (the hot path's interface), in order."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] == self.fail:
            raise Broke(f"{self.fail} broke")

    def fetched(self, started: float, ended: float, batch: Any) -> None:
        self._call("fetched", started, ended, batch)

    def exhausted(self, ended: float) -> None:
        self._call("exhausted", ended)

    def optimizer_stepped(self, opt: Any) -> None:
        self._call("optimizer_stepped", opt)

    def close(self) -> None:
        self._call("close")


class Handle:
    def __init__(self) -> None:
        self.removed = 0

    def remove(self) -> None:
        self.removed += 1


class Closable:
    """A trial as auto closes it."""

    def __init__(self, error: Exception | None = None) -> None:
        self.closed: list[bool] = []
        self.error = error

    def close(self, clean: bool = True) -> None:
        self.closed.append(clean)
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    """A Pushgateway stand-in on loopback (a pull-mode trial takes half a second to close)."""
    with scripted_server() as (url, _script):
        yield url


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    """A fresh AUTO; what on_torch replaces put back after; fork and exit hooks recorded."""
    monkeypatch.setattr(auto, "AUTO", _Auto())
    iterator = dataloader._BaseDataLoaderIter
    monkeypatch.setattr(iterator, "__next__", iterator.__next__)
    monkeypatch.setattr(Trial, "__init__", Trial.__init__)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(sys, "exit", sys.exit)
    recorded: dict[str, list[Any]] = {"at_fork": [], "atexit": []}
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: recorded["at_fork"].append(kw))
    monkeypatch.setattr(atexit, "register", lambda f: recorded["atexit"].append(f))
    for name in list(os.environ):
        if name.startswith(("TRAINWATCH_", "SLURM_", "TORCHELASTIC", "KUBERNETES")) or name in (
                "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "0.1"])  # the script is the first
    hooks = dict(torch_optimizer._global_optimizer_post_hooks)
    yield recorded
    closing, auto.AUTO.trial = auto.AUTO.trial, None
    if closing is not None and hasattr(closing, "registry"):
        closing.close()
    torch_optimizer._global_optimizer_post_hooks.clear()
    torch_optimizer._global_optimizer_post_hooks.update(hooks)


def timing(steps: Any = None) -> _Auto:
    """The fresh AUTO, ready, timing into ``steps`` when given."""
    auto.AUTO.ready = True
    auto.AUTO.hot = steps
    return auto.AUTO


def batches(n: int = 3, size: int = 2) -> DataLoader:  # type: ignore[type-arg]
    return DataLoader([torch.full((4,), float(i)) for i in range(n * size)], batch_size=size)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == auto.__name__]


def value(trial: Trial, name: str, **labels: str) -> float | None:
    """A sample of the trial's registry whose labels include ``labels``."""
    found = [s.value for family in trial.registry.collect() for s in family.samples
             if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) <= 1, found
    return found[0] if found else None


# --- _Auto ---------------------------------------------------------------------------------

def test_active_is_ready_and_not_off_both_ways() -> None:
    state = _Auto()
    assert (state.ready, state.off, state.active, state.hot, state.trial) == (
        False, False, False, None, None)
    assert state.exit_code == 0 and state.pid == os.getpid() and state.handles == []
    state.ready = True
    assert state.active
    state.off = True
    assert not state.active
    state.ready = False
    assert not state.active


def test_a_failure_warns_once_removes_every_hook_and_closes_the_trial_clean(
        caplog: pytest.LogCaptureFixture) -> None:
    state, trial, handles = _Auto(), Closable(), [Handle(), Handle()]
    state.ready, state.hot, state.trial, state.handles = True, Steps(), trial, list(handles)
    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        state.fail(ValueError("bad interval"))
        state.fail(KeyError("again"))
    assert warnings_of(caplog) == [WARNING.format("ValueError: bad interval")]
    assert (state.off, state.hot, state.trial, state.handles) == (True, None, None, [])
    assert [h.removed for h in handles] == [1, 1]
    assert trial.closed == [True]
    assert not state.active


def test_standing_aside_in_a_forked_child_leaves_the_parents_trial_unclosed() -> None:
    for other in (os.getpid() + 1, os.getpid() - 1):  # a child's pid may sort either side
        state, trial = _Auto(), Closable()
        state.trial, state.pid = trial, other
        state.stand_aside()
        assert (state.off, state.trial, trial.closed) == (True, None, []), other


def test_close_marks_the_exit_code_and_only_the_making_process_closes() -> None:
    for code, clean in ((0, True), (None, True), (False, True), (3, False), (1, False),
                        (-1, False), ("bad config", False)):
        state, trial = _Auto(), Closable()
        state.trial, state.exit_code = trial, code
        state.close()
        state.close()  # at exit again, after the excepthook's: nothing more
        assert (trial.closed, state.trial) == ([clean], None), code
    for other in (os.getpid() + 1, os.getpid() - 1):
        state, trial = _Auto(), Closable()
        state.trial, state.pid = trial, other
        state.close()
        assert (trial.closed, state.trial) == ([], None), other
    _Auto().close()  # no trial: nothing to do


def test_start_does_nothing_with_a_trial_or_when_off(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)  # a trial would be enabled
    state = timing()
    made = Closable()
    state.trial = made
    state.start()
    assert (state.trial, state.hot, fresh["atexit"]) == (made, None, [])
    state.trial, state.off = None, True
    state.start()
    assert (state.trial, state.hot, fresh["atexit"]) == (None, None, [])


def test_start_without_a_pushgateway_says_so_and_stands_aside(
        fresh: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    state = timing()
    state.start()
    assert capsys.readouterr().err == (
        "trainwatch: automatic instrumentation is on but no Pushgateway is set "
        "(TRAINWATCH_PUSHGATEWAY): nothing is timed\n")
    assert (state.off, state.trial, state.hot, state.creating, fresh["atexit"]) == (
        True, None, None, False, [])


@pytest.mark.parametrize(("env", "experiment", "trial", "where"), [
    ({}, "bert", "4242", "Slurm, Slurm"),
    ({"TRAINWATCH_EXPERIMENT": "mine"}, "mine", "4242", "Slurm, Slurm"),
    ({"TRAINWATCH_TRIAL": "t9"}, "bert", "t9", "Slurm, Slurm"),
    ({"TRAINWATCH_EXPERIMENT": "mine", "TRAINWATCH_TRIAL": "t9"}, "mine", "t9",
     "TRAINWATCH_EXPERIMENT/TRAINWATCH_TRIAL"),
], ids=["slurm", "experiment-set", "trial-set", "both-set"])
def test_start_makes_the_trial_with_the_names_nobody_else_gave_and_says_them(
        fresh: dict[str, list[Any]], gateway: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], experiment: str, trial: str,
        where: str) -> None:
    for name, setting in {"SLURM_JOB_NAME": "bert", "SLURM_JOB_ID": "4242", "RANK": "2",
                          "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                          "TRAINWATCH_PUSHGATEWAY": gateway, **env}.items():
        monkeypatch.setenv(name, setting)
    state = timing()
    state.start()
    made = state.trial
    assert isinstance(made, Trial) and made.enabled
    assert (made.config.experiment, made.config.trial, made.config.rank) == (experiment, trial, 2)
    assert capsys.readouterr().err == (
        f"trainwatch: timing train.py as experiment {experiment}, trial {trial}, rank 2 of 4 "
        f"(names from {where}), pushing to {gateway}\n")
    assert isinstance(state.hot, AutoSteps) and state.hot is state.steps
    assert fresh["atexit"] == [state.close] and not state.off and not state.creating
    state.start()  # once
    assert state.trial is made and fresh["atexit"] == [state.close]


def test_start_serving_says_the_port_and_python_for_no_script(
        fresh: dict[str, list[Any]], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [""])
    monkeypatch.setenv("TRAINWATCH_PULL_PORT", "0")
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "e")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "t")
    state = timing()
    state.start()
    made = state.trial
    assert isinstance(made, Trial) and made.pull_port  # serving on a port of its own
    assert capsys.readouterr().err == (
        "trainwatch: timing python as experiment e, trial t, rank 0 of 1 (names from "
        "TRAINWATCH_EXPERIMENT/TRAINWATCH_TRIAL), serving /metrics on port 0\n")
    state.close()
    assert state.trial is None
    assert value(made, "trainwatch_trial_exit", reason=names.EXIT_CLEAN) == 1


def test_a_trial_that_cannot_be_made_leaves_auto_not_creating(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    monkeypatch.setenv("TRAINWATCH_PUSH_INTERVAL", "soon")
    state = timing()
    seen: list[bool] = []
    original = Trial.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(state.creating)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Trial, "__init__", spy)
    with pytest.raises(ValueError, match="TRAINWATCH_PUSH_INTERVAL"):
        state.start()
    assert seen == [True] and not state.creating and state.trial is None


def test_the_trials_close_ends_the_open_steps_first(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "e")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "closing")
    state = timing()
    state.start()
    made, steps = state.trial, state.hot
    assert isinstance(made, Trial) and steps is not None
    for i in range(3):  # three fetches and no optimizer: counted per batch at close
        steps.fetched(i * 0.1, i * 0.1 + 0.01, torch.zeros(5, 2))
    assert value(made, "trainwatch_trial_steps_total") == 0
    state.exit_code = 2
    state.close()
    assert state.hot is None and state.trial is None
    assert value(made, "trainwatch_trial_steps_total") == 3
    assert value(made, "trainwatch_trial_samples_total") == 15
    assert value(made, "trainwatch_trial_exit", reason=names.EXIT_FAILED) == 1
    assert value(made, "trainwatch_trial_exit", reason=names.EXIT_CLEAN) is None


# --- on_torch and what it installs ---------------------------------------------------------

def test_on_torch_installs_every_hook_and_is_ready(fresh: dict[str, list[Any]]) -> None:
    before = (dataloader._BaseDataLoaderIter.__next__, Trial.__init__, sys.excepthook, sys.exit)
    hooks = len(torch_optimizer._global_optimizer_post_hooks)
    auto.on_torch(torch)
    state = auto.AUTO
    assert state.ready and state.active and state.hot is None and state.trial is None
    after = (dataloader._BaseDataLoaderIter.__next__, Trial.__init__, sys.excepthook, sys.exit)
    assert [a is b for a, b in zip(before, after, strict=True)] == [False] * 4
    assert fresh["at_fork"] == [{"after_in_child": auto._forked}]
    assert len(state.handles) == 1
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks + 1
    state.handles[0].remove()
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks


def test_on_torch_failing_warns_once_and_leaves_no_hook_timing(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def no_fork(**kwargs: Any) -> None:
        raise OSError("no fork here")

    monkeypatch.setattr(os, "register_at_fork", no_fork)
    hooks = len(torch_optimizer._global_optimizer_post_hooks)
    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        auto.on_torch(torch)
    state = auto.AUTO
    assert warnings_of(caplog) == [WARNING.format("OSError: no fork here")]
    assert (state.ready, state.off, state.handles) == (False, True, [])
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)  # a trial could be made: none is
    assert [b.tolist() for b in batches(2, 1)] == [[[0.0] * 4], [[1.0] * 4]]
    assert state.trial is None


def test_frameworks_are_handed_their_trainer_and_auto(
        fresh: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from trial_instrumentation.auto import frameworks

    patched: list[tuple[Any, ...]] = []
    monkeypatch.setattr(frameworks, "patch", lambda *args: patched.append(args))
    lightning, transformers = (types.SimpleNamespace(Trainer=type(name, (), {}))
                               for name in ("L", "T"))
    auto.on_lightning(lightning)
    auto.on_transformers(transformers)
    assert patched == [(lightning.Trainer, "lightning", auto.AUTO),
                       (transformers.Trainer, "transformers", auto.AUTO)]


def test_a_forked_child_times_nothing_and_leaves_its_parents_hooks() -> None:
    state, handle, steps = _Auto(), Handle(), Steps()
    state.ready, state.hot, state.handles = True, steps, [handle]
    saved = auto.AUTO
    auto.AUTO = state
    try:
        auto._forked()
    finally:
        auto.AUTO = saved
    assert (state.off, state.hot, state.handles, handle.removed, state.active) == (
        True, None, [], 0, False)


# --- the DataLoader's __next__ -------------------------------------------------------------

def test_the_loader_is_untouched_until_ready(fresh: dict[str, list[Any]], gateway: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    auto._patch_loader(torch)
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    assert [b[:, 0].tolist() for b in batches()] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert auto.AUTO.trial is None and auto.AUTO.hot is None


def test_each_fetch_is_timed_around_the_real_one_and_the_end_is_told(
        fresh: dict[str, list[Any]]) -> None:
    inside: list[float] = []

    class Clocked(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            from time import perf_counter
            inside.append(perf_counter())
            return torch.full((3,), float(i))

    auto._patch_loader(torch)
    steps = Steps()
    timing(steps)
    got = list(DataLoader(Clocked(), batch_size=2))
    fetched = [c for c in steps.calls if c[0] == "fetched"]
    assert [c[3] for c in fetched] == got and len(got) == 2
    for (_, started, ended, _), (first, second) in zip(fetched, (inside[:2], inside[2:]),
                                                        strict=True):
        assert started <= first <= second <= ended
    assert [c[0] for c in steps.calls] == ["fetched", "fetched", "exhausted"]
    assert steps.calls[2][1] >= fetched[1][2]


def test_the_first_fetch_starts_the_trial_and_is_counted(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "e")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "first-fetch")
    auto._patch_loader(torch)
    state = timing()
    loader = iter(batches(3, 2))
    next(loader)
    made = state.trial
    assert isinstance(made, Trial) and state.hot is state.steps
    assert state.steps.per_batch is False and state.steps._samples == 2  # the first is in
    for _ in loader:
        pass
    state.close()
    assert value(made, "trainwatch_trial_steps_total") == 3
    assert value(made, "trainwatch_trial_samples_total") == 6
    assert value(made, "trainwatch_trial_phase_seconds_count", phase=names.DATALOADER_NEXT) == 3


def test_an_empty_loader_before_any_trial_starts_nothing(fresh: dict[str, list[Any]], gateway: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    auto._patch_loader(torch)
    state = timing()
    assert list(DataLoader([], batch_size=2)) == []
    assert (state.trial, state.hot, state.off) == (None, None, False)


def test_a_trial_that_stands_aside_at_the_first_fetch_still_gives_every_batch(
        fresh: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    auto._patch_loader(torch)  # no pushgateway: the trial is made disabled, auto stands aside
    state = timing()
    assert [b[:, 0].tolist() for b in batches()] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert (state.off, state.trial, state.hot) == (True, None, None)
    assert capsys.readouterr().err.count("no Pushgateway is set") == 1


@pytest.mark.parametrize("broken", ["fetched", "exhausted"])
def test_a_failing_step_clock_warns_once_and_the_loop_runs_on_untimed(
        fresh: dict[str, list[Any]], caplog: pytest.LogCaptureFixture, broken: str) -> None:
    auto._patch_loader(torch)
    steps = Steps(fail=broken)
    state = timing(steps)
    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        for _epoch in range(2):
            assert [b[:, 0].tolist() for b in batches()] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert warnings_of(caplog) == [WARNING.format(f"Broke: {broken} broke")]
    assert [c[0] for c in steps.calls] == (["fetched"] if broken == "fetched"
                                           else ["fetched"] * 3 + ["exhausted"])
    assert state.off and state.hot is None


# --- the optimizer hook --------------------------------------------------------------------

class Optimizer:
    """An optimizer as torch's global post-step hooks see it. Its step is the hook called as
    torch's Optimizer.step calls it: a real first step imports torch._dynamo (seconds)."""

    def step(self) -> None:
        for hook in list(torch_optimizer._global_optimizer_post_hooks.values()):
            hook(self, (), {})


def sgd() -> Optimizer:
    return Optimizer()


def test_an_optimizer_step_is_told_only_while_timing(fresh: dict[str, list[Any]]) -> None:
    auto._patch_optimizers(torch)
    opt = sgd()
    opt.step()  # not ready: nothing, and no trial
    assert auto.AUTO.trial is None
    steps = Steps()
    timing(steps)
    opt.step()
    opt.step()
    assert steps.calls == [("optimizer_stepped", opt), ("optimizer_stepped", opt)]
    auto.AUTO.handles[0].remove()
    opt.step()
    assert len(steps.calls) == 2


def test_the_first_optimizer_step_starts_the_trial_and_counts(
        fresh: dict[str, list[Any]], gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATEWAY", gateway)
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "e")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "first-step")
    auto._patch_optimizers(torch)
    state = timing()
    opt = sgd()
    for _ in range(4):
        opt.step()
    made = state.trial
    assert isinstance(made, Trial)
    state.close()
    assert value(made, "trainwatch_trial_steps_total") == 4


def test_an_optimizer_step_with_auto_standing_aside_at_start_is_left_alone(
        fresh: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    auto._patch_optimizers(torch)
    state = timing()
    opt = sgd()
    opt.step()
    opt.step()
    assert (state.off, state.trial, state.hot) == (True, None, None)
    assert capsys.readouterr().err.count("no Pushgateway is set") == 1


def test_a_failing_optimizer_hook_warns_once_and_removes_itself(
        fresh: dict[str, list[Any]], caplog: pytest.LogCaptureFixture) -> None:
    hooks = len(torch_optimizer._global_optimizer_post_hooks)
    auto._patch_optimizers(torch)
    steps = Steps(fail="optimizer_stepped")
    timing(steps)
    opt = sgd()
    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        opt.step()
        opt.step()
    assert warnings_of(caplog) == [WARNING.format("Broke: optimizer_stepped broke")]
    assert len(steps.calls) == 1 and auto.AUTO.handles == []
    assert len(torch_optimizer._global_optimizer_post_hooks) == hooks


def test_a_torch_without_global_optimizer_hooks_says_so_and_adds_none(
        fresh: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delattr(torch_optimizer, "register_optimizer_step_post_hook")
    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        auto._patch_optimizers(torch)
    assert warnings_of(caplog) == [("trainwatch: this torch has no global optimizer step hooks: "
                                    "steps are counted per fetched batch")]
    assert auto.AUTO.handles == []


def test_safely_calls_with_the_arguments_and_turns_a_failure_into_off(
        fresh: dict[str, list[Any]], caplog: pytest.LogCaptureFixture) -> None:
    got: list[tuple[Any, ...]] = []
    auto._safely(lambda *a: got.append(a), 1.5, "x")
    assert got == [(1.5, "x")] and not auto.AUTO.off

    def broken(x: float) -> None:
        raise LookupError(x)

    with caplog.at_level(logging.WARNING, logger=auto.__name__):
        auto._safely(broken, 2.5)
    assert warnings_of(caplog) == [WARNING.format("LookupError: 2.5")] and auto.AUTO.off


# --- a script's own Trial ------------------------------------------------------------------

def test_a_scripts_own_trial_makes_auto_stand_aside_first(fresh: dict[str, list[Any]]) -> None:
    auto._watch_explicit_trials()
    state, ours, handle = timing(Steps()), Closable(), Handle()
    state.trial, state.handles = ours, [handle]
    mine = Trial(experiment="script", trial="own")
    assert mine.config.experiment == "script"  # made as asked
    assert (state.off, state.hot, state.trial, ours.closed, handle.removed) == (
        True, None, None, [True], 1)
    Trial(experiment="script", trial="again")  # off already: nothing more
    assert (ours.closed, handle.removed) == ([True], 1)


def test_auto_making_its_own_trial_does_not_stand_aside(fresh: dict[str, list[Any]]) -> None:
    auto._watch_explicit_trials()
    state, ours = timing(Steps()), Closable()
    state.trial, state.creating = ours, True
    Trial(experiment="auto", trial="own")
    assert (state.off, state.trial, ours.closed) == (False, ours, [])


def test_an_off_auto_is_not_stood_aside_again(fresh: dict[str, list[Any]]) -> None:
    auto._watch_explicit_trials()
    state, ours, handle = timing(), Closable(), Handle()
    state.off, state.trial, state.handles = True, ours, [handle]
    Trial(experiment="script", trial="own")
    assert (state.trial, ours.closed, handle.removed) == (ours, [], 0)


# --- the exit ------------------------------------------------------------------------------

def test_an_uncaught_exception_closes_the_trial_failed_then_reports_it(
        fresh: dict[str, list[Any]]) -> None:
    reported: list[tuple[Any, ...]] = []
    sys.excepthook = lambda *args: reported.append(args)
    auto._watch_exit()
    ours = Closable()
    auto.AUTO.trial = ours
    error = ZeroDivisionError("x")
    sys.excepthook(ZeroDivisionError, error, None)
    assert auto.AUTO.exit_code == 1 and ours.closed == [False]
    assert reported == [(ZeroDivisionError, error, None)]


def test_the_original_excepthook_runs_even_when_the_close_fails(
        fresh: dict[str, list[Any]]) -> None:
    reported: list[tuple[Any, ...]] = []
    sys.excepthook = lambda *args: reported.append(args)
    auto._watch_exit()
    auto.AUTO.trial = Closable(RuntimeError("push failed"))
    with pytest.raises(RuntimeError, match="push failed"):
        sys.excepthook(KeyError, KeyError("k"), None)
    assert len(reported) == 1


def test_sys_exit_is_remembered_for_the_close_and_still_exits(
        fresh: dict[str, list[Any]]) -> None:
    exited: list[object] = []

    def original(code: object = None) -> None:
        exited.append(code)
        raise SystemExit(code)

    sys.exit = original  # type: ignore[assignment]
    auto._watch_exit()
    with pytest.raises(SystemExit) as raised:
        sys.exit(3)
    assert raised.value.code == 3 and auto.AUTO.exit_code == 3
    with pytest.raises(SystemExit):
        sys.exit()
    assert exited == [3, None] and auto.AUTO.exit_code is None
