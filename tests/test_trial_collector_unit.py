"""The trial's collector (trial_instrumentation/collector.py) read directly: every family, its
labels and values from a state with distinct numbers, what is left out while unknown, the
phase limit at its exact edge, and cumulative buckets."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from trial_instrumentation import names
from trial_instrumentation.collector import TrialCollector, TrialState, cumulative_buckets
from trial_instrumentation.timing import Histogram

BOUNDS = (0.1, 0.5, 2.0)
INFO = {"nodename": "node-7", "pid": "4321", "world_size": "3"}
KEY = {"experiment": "exp", "trial": "t1", "rank": "2"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(registry: CollectorRegistry) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def _registry(state: TrialState, const: dict[str, str] | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TrialCollector(state, const))
    return registry


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_cumulative_buckets_run_up_to_the_count_with_go_style_bounds_and_the_sum() -> None:
    histogram = Histogram(BOUNDS)
    for seconds in (0.05, 0.3, 0.3, 1.0, 5.0, 0.1):
        histogram.observe(seconds)
    buckets, total = cumulative_buckets(histogram)
    assert buckets == [("0.1", 2.0), ("0.5", 4.0), ("2.0", 5.0), ("+Inf", 6.0)]
    assert total == pytest.approx(6.75)
    assert all(isinstance(count, float) for _, count in buckets)
    empty, nothing = cumulative_buckets(Histogram(BOUNDS))
    assert empty == [("0.1", 0.0), ("0.5", 0.0), ("2.0", 0.0), ("+Inf", 0.0)]
    assert nothing == 0


def test_phase_histograms_use_the_phase_buckets_when_given_else_the_step_buckets() -> None:
    plain = TrialState(BOUNDS, INFO)
    assert plain.phase_histogram("train_batch").bounds == BOUNDS
    assert plain.step.bounds == BOUNDS
    own = TrialState(BOUNDS, INFO, phase_buckets=(0.25,))
    assert own.phase_histogram("train_batch").bounds == (0.25,)
    assert own.step.bounds == BOUNDS  # the step keeps the trial's buckets
    inf_only = TrialState(BOUNDS, INFO, phase_buckets=())
    assert inf_only.phase_histogram("train_batch").bounds == ()
    # Made once: the second call is the same histogram.
    assert plain.phase_histogram("train_batch") is plain.phase_histogram("train_batch")
    assert list(plain.phases) == ["train_batch"]


def _fill(state: TrialState, others: int) -> None:
    for name in names.ALWAYS_TIMED_PHASES:
        state.phase_histogram(name)
    for k in range(others):
        state.phase_histogram(f"own_{k}")


def test_the_limit_admits_max_phases_own_names_besides_the_standard_ones_and_no_more(
        caplog: pytest.LogCaptureFixture) -> None:
    state = TrialState(BOUNDS, INFO)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.collector"):
        _fill(state, names.MAX_PHASES - 1)
        assert state.admits("last_one")  # the standard phases do not count against it
        state.phase_histogram("last_one")
        assert state.dropped_phase is None
        assert not caplog.records
        assert len(state.phases) == len(names.ALWAYS_TIMED_PHASES) + names.MAX_PHASES
        refused = state.phase_histogram("one_too_many")
        assert "one_too_many" not in state.phases
        assert refused.bounds == BOUNDS  # detached, but usable
        assert state.dropped_phase == "one_too_many"
        assert len(caplog.records) == 1
        assert "one_too_many" in caplog.records[0].getMessage()
        assert str(names.MAX_PHASES) in caplog.records[0].getMessage()
        # Full stays full: later names are refused, quietly; the first refused stays named.
        assert not state.admits("later")
        assert state.dropped_phase == "one_too_many"
        assert len(caplog.records) == 1
    # Names already timed and the standard ones are still admitted.
    assert state.admits("own_0") and state.admits("last_one")
    assert all(state.admits(name) for name in names.ALWAYS_TIMED_PHASES)


def test_the_standard_phases_count_only_when_timed() -> None:
    # Without the standard phases timed, MAX_PHASES own names fill it all the same.
    state = TrialState(BOUNDS, INFO)
    for k in range(names.MAX_PHASES):
        assert state.admits(f"own_{k}")
        state.phase_histogram(f"own_{k}")
    assert state.dropped_phase is None
    assert not state.admits("own_extra")
    # A standard phase first timed after the limit is admitted all the same.
    assert state.admits(names.TRAIN_BATCH)
    state.phase_histogram(names.WAIT_FOR_RANKS)
    assert names.WAIT_FOR_RANKS in state.phases


def test_an_own_name_is_admitted_with_some_standard_phases_timed_and_room_left() -> None:
    state = TrialState(BOUNDS, INFO)
    state.phase_histogram(names.TRAIN_BATCH)
    state.phase_histogram(names.DATALOADER_NEXT)
    for k in range(names.MAX_PHASES - 1):
        state.phase_histogram(f"own_{k}")
    assert state.admits("fits")
    assert state.dropped_phase is None


def _full_state() -> TrialState:
    state = TrialState(BOUNDS, INFO, gpu_uuids=lambda: ("GPU-a", "GPU-b"))
    state.phase_histogram("train_batch").observe(0.3)
    state.phase_histogram("train_batch").observe(1.5)
    state.step.observe(0.4)
    state.step.observe(3.0)
    state.progress.samples = 96
    state.push_failures = 5
    state.limits[names.LOADER_LIMIT] = 123.5
    state.limits[names.STEP_LIMIT] = 77.25
    state.started_at = 1700000000.5
    state.push_interval = 15.5
    state.model_flops = ("bf16", 3.5e9)
    state.compute_threads = 7
    state.exit_reason = names.EXIT_TERMINATED
    return state


def test_every_family_with_its_values_when_everything_is_known() -> None:
    got = _samples(_registry(_full_state()))
    phase, step = names.PHASE_SECONDS, names.STEP_SECONDS
    assert got == {
        (f"{phase}_bucket", _labels(phase="train_batch", le="0.1")): 0.0,
        (f"{phase}_bucket", _labels(phase="train_batch", le="0.5")): 1.0,
        (f"{phase}_bucket", _labels(phase="train_batch", le="2.0")): 2.0,
        (f"{phase}_bucket", _labels(phase="train_batch", le="+Inf")): 2.0,
        (f"{phase}_count", _labels(phase="train_batch")): 2.0,
        (f"{phase}_sum", _labels(phase="train_batch")): 1.8,
        (f"{step}_bucket", _labels(le="0.1")): 0.0,
        (f"{step}_bucket", _labels(le="0.5")): 1.0,
        (f"{step}_bucket", _labels(le="2.0")): 1.0,
        (f"{step}_bucket", _labels(le="+Inf")): 2.0,
        (f"{step}_count", ()): 2.0,
        (f"{step}_sum", ()): 3.4,
        (f"{names.STEPS}_total", ()): 2.0,
        (f"{names.SAMPLES}_total", ()): 96.0,
        (f"{names.PUSH_FAILURES}_total", ()): 5.0,
        (names.TRIAL_INFO, _labels(**INFO)): 1.0,
        (names.GPU_INFO, _labels(uuid="GPU-a")): 1.0,
        (names.GPU_INFO, _labels(uuid="GPU-b")): 1.0,
        (names.START_TIME, ()): 1700000000.5,
        (names.PUSH_INTERVAL, ()): 15.5,
        (names.EXIT, _labels(reason=names.EXIT_TERMINATED)): 1.0,
        (names.MODEL_FLOPS, _labels(precision="bf16")): 3.5e9,
        (names.COMPUTE_THREADS, ()): 7.0,
        (names.LOADER_LIMIT, ()): 123.5,
        (names.STEP_LIMIT, ()): 77.25,
    }


def test_pull_mode_puts_the_key_on_every_series_and_the_text_is_well_formed() -> None:
    state = _full_state()
    got = _samples(_registry(state, KEY))
    assert got  # every sample carries the key, and the labels after it are its own
    assert all(dict(labels).items() >= KEY.items() for _, labels in got)
    assert got[(names.EXIT, _labels(**KEY, reason=names.EXIT_TERMINATED))] == 1.0
    assert got[(names.TRIAL_INFO, _labels(**KEY, **INFO))] == 1.0
    assert got[(names.GPU_INFO, _labels(**KEY, uuid="GPU-b"))] == 1.0
    assert got[(f"{names.PHASE_SECONDS}_bucket",
                _labels(**KEY, phase="train_batch", le="0.5"))] == 1.0
    assert got[(names.MODEL_FLOPS, _labels(**KEY, precision="bf16"))] == 3.5e9
    text = generate_latest(_registry(state, KEY)).decode()
    assert 'trainwatch_trial_steps_total{experiment="exp",rank="2",trial="t1"} 2.0' in text


def test_what_is_not_known_is_left_out_and_nothing_is_made_up() -> None:
    state = TrialState(BOUNDS, INFO)
    got = _samples(_registry(state))
    families = {name for name, _ in got}
    for absent in (names.START_TIME, names.PUSH_INTERVAL, names.EXIT, names.MODEL_FLOPS,
                   names.COMPUTE_THREADS, names.LOADER_LIMIT, names.STEP_LIMIT, names.GPU_INFO,
                   f"{names.PHASE_SECONDS}_count"):
        assert absent not in families
    assert got[(f"{names.STEPS}_total", ())] == 0.0
    assert got[(f"{names.SAMPLES}_total", ())] == 0.0
    assert got[(f"{names.PUSH_FAILURES}_total", ())] == 0.0
    assert got[(names.TRIAL_INFO, _labels(**INFO))] == 1.0
    # One limit measured: that one only. Zero threads are a value, not "unknown".
    state.limits[names.STEP_LIMIT] = 9.5
    state.compute_threads = 0
    state.started_at = 0.0
    got = _samples(_registry(state))
    assert got[(names.STEP_LIMIT, ())] == 9.5
    assert (names.LOADER_LIMIT, ()) not in got
    assert got[(names.COMPUTE_THREADS, ())] == 0.0
    assert got[(names.START_TIME, ())] == 0.0


def test_each_collection_resolves_pending_events_first_and_remembers_the_steps_delivered(
) -> None:
    state = TrialState(BOUNDS, INFO)
    calls: list[int] = []

    def resolve() -> None:  # pending CUDA events land in the phase before it is read
        calls.append(1)
        state.phase_histogram("train_batch").observe(0.2)

    state.resolve_pending = resolve
    registry = _registry(state)
    state.step.observe(0.3)
    state.step.observe(0.3)
    state.step.observe(0.3)
    got = _samples(registry)
    assert calls == [1]
    assert got[(f"{names.PHASE_SECONDS}_count", _labels(phase="train_batch"))] == 1.0
    assert state.steps_delivered == 3.0
    assert state.announced == {"train_batch"}
    _samples(registry)
    assert calls == [1, 1]


def test_a_phase_born_after_delivered_steps_is_zero_once_unless_this_is_the_final_push() -> None:
    state = TrialState(BOUNDS, INFO)
    registry = _registry(state)
    count = (f"{names.PHASE_SECONDS}_count", _labels(phase="validate"))
    total = (f"{names.PHASE_SECONDS}_sum", _labels(phase="validate"))
    bucket = (f"{names.PHASE_SECONDS}_bucket", _labels(phase="validate", le="2.0"))
    state.step.observe(0.3)
    _samples(registry)
    state.phase_histogram("validate").observe(1.25)
    born = _samples(registry)
    assert (born[count], born[total], born[bucket]) == (0.0, 0.0, 0.0)
    after = _samples(registry)
    assert (after[count], after[total], after[bucket]) == (1.0, 1.25, 1.0)
    # The final push carries the truth even for a phase it is the first to see.
    state.phase_histogram("final_eval").observe(0.4)
    state.exit_reason = names.EXIT_CLEAN
    final = _samples(registry)
    assert final[(f"{names.PHASE_SECONDS}_count", _labels(phase="final_eval"))] == 1.0
    assert final[(f"{names.PHASE_SECONDS}_sum", _labels(phase="final_eval"))] == 0.4


def test_a_phase_timed_before_any_step_was_delivered_is_delivered_as_it_is() -> None:
    state = TrialState(BOUNDS, INFO)
    registry = _registry(state)
    _samples(registry)  # a collection with no step: nothing delivered yet
    state.phase_histogram("train_batch").observe(0.3)
    got = _samples(registry)
    assert got[(f"{names.PHASE_SECONDS}_count", _labels(phase="train_batch"))] == 1.0


def test_steps_slower_than_every_bucket_count_as_delivered_too() -> None:
    # Every step past the largest bound: only the +Inf bucket holds them.
    state = TrialState(BOUNDS, INFO)
    registry = _registry(state)
    state.step.observe(5.0)
    state.step.observe(7.5)
    _samples(registry)
    assert state.steps_delivered == 2.0
    state.phase_histogram("validate").observe(1.25)
    born = _samples(registry)
    assert born[(f"{names.PHASE_SECONDS}_count", _labels(phase="validate"))] == 0.0


def test_a_state_made_with_more_own_phases_than_the_limit_admits_no_new_one() -> None:
    own = {f"own_{k}": Histogram(BOUNDS) for k in range(names.MAX_PHASES + 2)}
    state = TrialState(BOUNDS, INFO, phases=own)
    assert not state.admits("another")
    assert state.dropped_phase == "another"
    assert state.admits("own_3")
