"""StepRecorder, what a framework integration hands its step times to: each call reaches its
own histogram and nothing else, the first step's hook runs once, an armed profile request hears
of every step's end; the unconfigured trial's recorder does nothing."""

from __future__ import annotations

import pytest

from trial_instrumentation.loader import Progress
from trial_instrumentation.profiling import StepBoundary
from trial_instrumentation.steps import NoopStepRecorder, StepRecorder
from trial_instrumentation.timing import Histogram

BOUNDS = (0.001, 0.01, 0.1, 1.0)


class Boundary(StepBoundary):
    __slots__ = ("ended",)

    def __init__(self, armed: bool) -> None:
        super().__init__()
        self.armed, self.ended = armed, 0

    def step_ended(self) -> None:
        self.ended += 1


class Parts:
    def __init__(self, armed: bool = False) -> None:
        self.fetch, self.step, self.progress = Histogram(BOUNDS), Histogram(BOUNDS), Progress()
        self.phases: dict[str, Histogram] = {}
        self.firsts = 0
        self.boundary = Boundary(armed)

    def phase(self, name: str) -> Histogram:
        return self.phases.setdefault(name, Histogram(BOUNDS))

    def first(self) -> None:
        self.firsts += 1

    def recorder(self) -> StepRecorder:
        return StepRecorder(self.fetch, self.step, self.progress, on_first_step=self.first,
                            phase_histogram=self.phase, boundary=self.boundary)


def test_a_fetch_is_the_fetch_histograms_alone() -> None:
    parts = Parts()
    parts.recorder().fetched(0.0375)
    assert parts.fetch.snapshot() == ([0, 0, 1, 0, 0], 0.0375)
    assert parts.step.snapshot() == ([0] * 5, 0.0)
    assert (parts.progress.samples, parts.firsts, parts.phases) == (0, 0, {})


def test_a_phase_goes_to_its_own_histogram() -> None:
    parts = Parts()
    steps = parts.recorder()
    steps.observe("optimizer", 0.25)
    steps.observe("optimizer", 0.5)
    steps.observe("backward", 0.003)
    assert {name: h.snapshot() for name, h in parts.phases.items()} == {
        "optimizer": ([0, 0, 0, 2, 0], 0.75), "backward": ([0, 1, 0, 0, 0], 0.003)}
    assert parts.fetch.snapshot()[0] == parts.step.snapshot()[0] == [0] * 5
    # Without a phase histogram (no trial phases), observing does nothing, and does not fail.
    StepRecorder(parts.fetch, parts.step, parts.progress).observe("optimizer", 0.125)
    assert parts.phases["optimizer"].snapshot()[1] == 0.75


def test_steps_are_counted_with_their_samples_and_the_first_one_is_announced_once() -> None:
    parts = Parts()
    steps = parts.recorder()
    steps.stepped(0.0625, samples=7)
    assert parts.firsts == 1
    steps.stepped(2.5, samples=5)
    steps.stepped(0.0005, samples=3)
    assert parts.firsts == 1
    assert parts.step.snapshot() == ([1, 0, 1, 0, 1], 2.563)
    assert parts.progress.samples == 15
    assert parts.fetch.snapshot() == ([0] * 5, 0.0)
    assert parts.boundary.ended == 0  # never armed: not told


def test_a_recorder_without_a_first_step_hook_records_steps() -> None:
    parts = Parts()
    steps = StepRecorder(parts.fetch, parts.step, parts.progress)
    steps.stepped(0.125, samples=4)
    assert (parts.step.snapshot(), parts.progress.samples) == (([0, 0, 0, 1, 0], 0.125), 4)


def test_an_armed_profile_request_hears_each_steps_end() -> None:
    parts = Parts(armed=True)
    steps = parts.recorder()
    steps.stepped(0.125, samples=1)
    steps.stepped(0.125, samples=1)
    assert parts.boundary.ended == 2


@pytest.mark.parametrize("call", ["fetched", "observe", "stepped"])
def test_the_unconfigured_recorder_does_nothing(call: str) -> None:
    steps = NoopStepRecorder()
    arguments = {"fetched": (0.5,), "observe": ("phase", 0.5), "stepped": (0.5, 3)}[call]
    assert getattr(steps, call)(*arguments) is None
    assert not any(hasattr(steps, slot) for slot in StepRecorder.__slots__)
