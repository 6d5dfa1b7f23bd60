"""Born at zero: a phase first timed after steps were already delivered is delivered at 0 once,
then counted, so Prometheus's rate() sees all its time; phases timed from the first steps on
come with them (the rules read a young run from its counters' values), and the final push
always carries the truth."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from trial_instrumentation import names
from trial_instrumentation.collector import TrialCollector, TrialState

SUM, COUNT = f"{names.PHASE_SECONDS}_sum", f"{names.PHASE_SECONDS}_count"
BUCKET = f"{names.PHASE_SECONDS}_bucket"


def _trial() -> tuple[TrialState, CollectorRegistry]:
    state = TrialState(names.DEFAULT_BUCKETS, {"nodename": "n", "pid": "1", "world_size": "1"})
    registry = CollectorRegistry()
    registry.register(TrialCollector(state))
    return state, registry


def _step(state: TrialState, **phases: float) -> None:
    for phase, seconds in phases.items():
        state.phase_histogram(phase).observe(seconds)
    state.step.observe(sum(phases.values()))


Push = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _push(registry: CollectorRegistry) -> Push:
    """One collection, as one push delivers it: every sample by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples}


def _phase(push: Push, phase: str, le: str | None = None) -> tuple[float | None, ...]:
    if le is not None:
        return (push.get((BUCKET, (("le", le), ("phase", phase)))),)
    return push.get((SUM, (("phase", phase),))), push.get((COUNT, (("phase", phase),)))


def test_phases_timed_with_the_first_steps_are_delivered_as_they_are() -> None:
    state, registry = _trial()
    assert _phase(_push(registry), "train_batch") == (None, None)  # at start(): no phase
    _step(state, dataloader_next=0.75, train_batch=0.25)
    _step(state, dataloader_next=0.75, train_batch=0.25)
    second = _push(registry)
    assert _phase(second, "dataloader_next") == (1.5, 2.0)
    assert _phase(second, "train_batch") == (0.5, 2.0)


def test_a_phase_first_timed_after_steps_were_delivered_is_delivered_at_zero_once() -> None:
    state, registry = _trial()
    _step(state, train_batch=0.25)
    assert _phase(_push(registry), "train_batch") == (0.25, 1.0)  # steps delivered from here
    _step(state, train_batch=0.25, validate=2.0)
    born = _push(registry)
    assert _phase(born, "validate") == (0.0, 0.0)  # its first appearance: at zero
    assert _phase(born, "validate", "+Inf") == (0.0,)
    assert _phase(born, "train_batch") == (0.5, 2.0)  # known phases go on counting
    assert born[(f"{names.STEPS}_total", ())] == 2.0
    _step(state, train_batch=0.25, validate=2.0)
    counted = _push(registry)
    assert _phase(counted, "validate") == (4.0, 2.0)  # then everything, none lost
    assert _phase(counted, "validate", "+Inf") == (2.0,)
    assert _phase(_push(registry), "validate") == (4.0, 2.0)  # and never zeroed again


def test_the_final_push_carries_a_late_phase_whole() -> None:
    state, registry = _trial()
    _step(state, train_batch=0.25)
    _push(registry)  # a push that delivered steps
    _step(state, train_batch=0.25, save=3.0)
    state.exit_reason = names.EXIT_CLEAN  # no later push would bring it
    assert _phase(_push(registry), "save") == (3.0, 1.0)
