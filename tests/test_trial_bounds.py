"""What one trial can create is bounded (docs/instrumentation.md, "What one trial can create"):
distinct phase names (names.MAX_PHASES besides the standard ones: a new name past them is a
no-op, logged once), label and name lengths (names.MAX_LABEL_LENGTH: refused at Trial(), a
phase name follows the bad-name path) and the push interval (names.MIN_PUSH_INTERVAL: refused
at Trial()). Each bound is checked at the limit and one past it."""

from __future__ import annotations

import logging
import os
import re
import time

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service
from tests.trial_support import pushed
from trial_instrumentation import names
from trial_instrumentation.collector import TrialState
from trial_instrumentation.timing import NoopPhase, Phase

LOGGER = "trial_instrumentation"
PHASE_COUNT = "trainwatch_trial_phase_seconds_count"
GOOD = {"experiment": "e", "trial": "t", "pull_port": 0}
LONG = "x" * 10 * 2**20  # 10 MB, as the probe's
OWN = [f"batch_{i}" for i in range(names.MAX_PHASES)]  # exactly the limit of own names


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("TRAINWATCH_") or var in (names.ENV_RANK, names.ENV_WORLD_SIZE,
                                                     names.ENV_LOCAL_RANK):
            monkeypatch.delenv(var)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def collected_phases(trial: ti.Trial) -> set[str]:
    return {s.labels["phase"] for m in trial.registry.collect() for s in m.samples
            if s.name == PHASE_COUNT}


def time_phases(trial: ti.Trial, phases: list[str], steps: int = 3) -> None:
    for _ in trial.loader(range(steps), samples=1):
        for name in phases:
            with trial.phase(name):
                pass


# Phase names.

def test_the_limit_of_own_phase_names_is_timed_with_no_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        time_phases(trial, [*OWN, *names.STANDARD_PHASES, names.WAIT_FOR_RANKS])
        assert collected_phases(trial) == {*OWN, *names.ALWAYS_TIMED_PHASES}
    assert warnings(caplog) == []


def test_a_new_name_past_the_limit_is_a_no_op_logged_once_with_the_name_and_the_limit(
        caplog: pytest.LogCaptureFixture) -> None:
    dropped, also_dropped = "batch_extra", "batch_extra_2"
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        time_phases(trial, OWN)
        time_phases(trial, [dropped, also_dropped], steps=100)  # per step: still one line
        assert isinstance(trial.phase(dropped), NoopPhase)
        # The standard phases are timed past the limit: the dashboards and rules read them.
        time_phases(trial, [ti.TRAIN_BATCH, names.WAIT_FOR_RANKS])
        assert isinstance(trial.phase(ti.TRAIN_BATCH), Phase)
        assert collected_phases(trial) == {*OWN, names.DATALOADER_NEXT, ti.TRAIN_BATCH,
                                           names.WAIT_FOR_RANKS}
    [line] = warnings(caplog)
    assert line == (f"trainwatch: phase {dropped!r} is not timed: this trial already times "
                    f"{names.MAX_PHASES} phase names besides the standard ones, the limit "
                    "(names.MAX_PHASES); a name made per step or per item is a bug. Later new "
                    "names are not timed either, and not logged")


def test_the_final_push_carries_every_kept_phase_and_not_the_dropped_one(
        pushgateway: Service, caplog: pytest.LogCaptureFixture) -> None:
    with ti.Trial(experiment="e", trial="t", pushgateway=pushgateway.url,
                  push_interval=3600) as trial:  # the first push at start, then the final one
        time_phases(trial, [*OWN, ti.TRAIN_BATCH, "batch_extra"], steps=5)
    counts = {dict(labels)["phase"]: value for (name, labels), value in pushed(pushgateway).items()
              if name == PHASE_COUNT}
    assert counts == {name: 5.0 for name in (*OWN, ti.TRAIN_BATCH)} | {names.DATALOADER_NEXT: 5.0}
    assert ("trainwatch_trial_exit", (("experiment", "e"), ("instance", ""), ("job", names.JOB),
                                      ("rank", "0"), ("reason", "clean"), ("trial", "t"))) \
        in pushed(pushgateway)
    assert len([w for w in warnings(caplog) if "names.MAX_PHASES" in w]) == 1


def test_a_flood_of_names_keeps_the_phases_and_the_step_path_bounded(
        caplog: pytest.LogCaptureFixture) -> None:
    flood = 20_000
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        started = time.perf_counter()
        for step in trial.loader(range(flood), samples=1):
            with trial.phase(ti.TRAIN_BATCH):
                pass
            with trial.phase(f"step_{step}"):
                pass
        per_step = (time.perf_counter() - started) / flood
        state = trial._state
        assert len(state.phases) == names.MAX_PHASES + 2  # and dataloader_next, train_batch
        assert len(trial._phases) <= names.MAX_PHASES + 1  # no timer kept per dropped name
        assert len(collected_phases(trial)) == names.MAX_PHASES + 2
    assert per_step < 200e-6, f"{per_step * 1e6:.1f} µs a step"  # ~10 µs; 5.4 ms before
    assert len([w for w in warnings(caplog) if "names.MAX_PHASES" in w]) == 1


def test_the_step_recorders_phases_are_bounded_too(caplog: pytest.LogCaptureFixture) -> None:
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        recorder = trial.step_recorder()
        for name in [*OWN, "recorded_extra"]:
            recorder.observe(name, 0.001)
        recorder.observe(ti.REDUCE_METRICS, 0.001)
        assert collected_phases(trial) == {*OWN, names.DATALOADER_NEXT, ti.REDUCE_METRICS}
    assert trial._state.dropped_phase == "recorded_extra"
    assert len(warnings(caplog)) == 1


def test_the_bound_is_checked_when_a_name_is_new_never_per_observation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    admits = TrialState.admits

    def counted(self: TrialState, name: str) -> bool:
        asked.append(name)
        return admits(self, name)
    monkeypatch.setattr(TrialState, "admits", counted)
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        recorder = trial.step_recorder()
        time_phases(trial, [ti.TRAIN_BATCH, "evaluate"], steps=1)
        recorder.observe(ti.REDUCE_METRICS, 0.001)
        first = len(asked)
        time_phases(trial, [ti.TRAIN_BATCH, "evaluate"], steps=1000)
        for _ in range(1000):
            recorder.observe(ti.REDUCE_METRICS, 0.001)
    assert first > 0 and len(asked) == first, asked[first:first + 5]


# Label and name lengths.

@pytest.mark.parametrize("argument", ["experiment", "trial"])
def test_a_label_of_the_limit_is_accepted_and_one_longer_refused_naming_it(
        argument: str) -> None:
    at_limit = "a" * names.MAX_LABEL_LENGTH
    trial = ti.Trial(**{**GOOD, argument: at_limit})  # type: ignore[arg-type]
    assert trial.config.grouping_key[argument] == at_limit
    for value in (at_limit + "a", LONG):
        with pytest.raises(ValueError, match=rf"^argument {argument}=: invalid value .*at most "
                                             rf"{names.MAX_LABEL_LENGTH} characters") as caught:
            ti.Trial(**{**GOOD, argument: value})  # type: ignore[arg-type]
        assert len(str(caught.value)) < 300, len(str(caught.value))  # one short line


@pytest.mark.parametrize(("var", "value"), [
    (names.ENV_EXPERIMENT, "e" * (names.MAX_LABEL_LENGTH + 1)),
    (names.ENV_TRIAL, LONG),
    (names.ENV_NODENAME, "n" * (names.MAX_LABEL_LENGTH + 1)),
    (names.ENV_GPU_UUIDS, "GPU-" + "a" * names.MAX_LABEL_LENGTH),
    (names.ENV_RANK, "1" * (names.MAX_LABEL_LENGTH + 1)),
])
def test_a_long_variable_is_refused_naming_it_and_the_limit(
        monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(names.ENV_EXPERIMENT, "e")
    monkeypatch.setenv(names.ENV_TRIAL, "t")
    monkeypatch.setenv(names.ENV_PULL_PORT, "0")
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=rf"^environment variable {var}: invalid value .*at "
                                         rf"most {names.MAX_LABEL_LENGTH} characters"):
        ti.Trial()


def test_the_node_name_and_a_gpu_uuid_at_the_limit_are_accepted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node, uuid = "n" * names.MAX_LABEL_LENGTH, "GPU-" + "a" * (names.MAX_LABEL_LENGTH - 4)
    monkeypatch.setenv(names.ENV_NODENAME, node)
    trial = ti.Trial(**GOOD, gpu_uuids=[uuid])  # type: ignore[arg-type]
    assert (trial.config.nodename, trial.config.gpu_uuids) == (node, (uuid,))


@pytest.mark.parametrize("rank", [10**names.MAX_LABEL_LENGTH, float("inf"), 10**400])
def test_a_rank_too_long_for_a_label_or_a_float_is_a_value_error(rank: object) -> None:
    with pytest.raises(ValueError, match=r"^argument rank=: invalid value"):
        ti.Trial(**GOOD, rank=rank, world_size=2)  # type: ignore[arg-type]


def test_a_phase_name_of_the_limit_is_timed_and_a_longer_one_is_logged_once_bounded(
        caplog: pytest.LogCaptureFixture) -> None:
    at_limit, over = "p" * names.MAX_LABEL_LENGTH, "p" * (names.MAX_LABEL_LENGTH + 1)
    with ti.Trial(**GOOD) as trial:  # type: ignore[arg-type]
        time_phases(trial, [at_limit, over, LONG], steps=50)  # never raises into the loop
        assert isinstance(trial.phase(over), NoopPhase)
        assert collected_phases(trial) == {names.DATALOADER_NEXT, at_limit}
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2, errors  # one line per bad name, not one per step
    for line, length in zip(errors, (len(over), len(LONG))):
        assert re.fullmatch(rf"trainwatch: phase name '[px]+'\.\.\. \({length} characters\) is "
                            rf"longer than {names.MAX_LABEL_LENGTH} characters "
                            r"\(names.MAX_LABEL_LENGTH\); that phase is not timed", line), line
        assert len(line) < 300


# The push interval.

def test_the_shortest_push_interval_is_accepted_and_a_shorter_one_refused_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    floor = names.MIN_PUSH_INTERVAL
    assert ti.Trial(**GOOD, push_interval=floor).config.push_interval == floor  # type: ignore[arg-type]
    for value in (floor / 2, 1e-9, f"{floor * 1000 / 2:g}ms"):
        with pytest.raises(ValueError, match=rf"^argument push_interval=: invalid value .*must "
                                             rf"be at least {floor:g}s"):
            ti.Trial(**GOOD, push_interval=value)  # type: ignore[arg-type]
    monkeypatch.setenv(names.ENV_PUSH_INTERVAL, f"{floor:g}")
    assert ti.Trial(**GOOD).config.push_interval == floor  # type: ignore[arg-type]
    monkeypatch.setenv(names.ENV_PUSH_INTERVAL, "1e-9")
    with pytest.raises(ValueError, match=rf"^environment variable {names.ENV_PUSH_INTERVAL}: "
                                         rf"invalid value '1e-9' \(must be at least {floor:g}s"):
        ti.Trial(**GOOD)  # type: ignore[arg-type]


# The documentation.

def test_the_docs_state_each_bound_and_the_warning_the_code_logs(
        caplog: pytest.LogCaptureFixture) -> None:
    text = (REPO / "docs" / "instrumentation.md").read_text()
    section = text.split("### What one trial can create", 1)[1].split("\n#", 1)[0]
    assert f"at most {names.MAX_PHASES} (`MAX_PHASES`)" in section
    assert f"at most {names.MAX_LABEL_LENGTH} characters (`MAX_LABEL_LENGTH`)" in section
    assert f"at least {names.MIN_PUSH_INTERVAL:g} s (`MIN_PUSH_INTERVAL`)" in section
    state = TrialState(names.DEFAULT_BUCKETS, {})
    for i in range(names.MAX_PHASES + 1):
        state.phase_histogram(f"batch_{i}")
    [line] = warnings(caplog)
    assert f"```text\n{line}\n```" in section
