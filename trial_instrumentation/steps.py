"""Steps for frameworks that own the training loop (Lightning, the Hugging Face ``Trainer``).

``Trial.loader`` times steps by wrapping the loader; a framework's integration cannot wrap
the loader it iterates, so it measures a step's start and end itself (from the framework's
hooks) and hands the durations here. The same histograms and counters as ``Trial.loader``
receive them, so the metrics read exactly alike.
"""

from __future__ import annotations

from collections.abc import Callable

from trial_instrumentation.loader import Progress
from trial_instrumentation.profiling import NEVER, StepBoundary
from trial_instrumentation.timing import Histogram


class StepRecorder:
    """Records finished steps (``trainwatch_trial_step_seconds``, steps, samples) and
    data-loading time (the ``dataloader_next`` phase). One writer: the training thread.

    >>> from trial_instrumentation.names import DEFAULT_BUCKETS
    >>> fetch, step, progress = Histogram(DEFAULT_BUCKETS), Histogram(DEFAULT_BUCKETS), Progress()
    >>> steps = StepRecorder(fetch, step, progress)
    >>> steps.fetched(0.002); steps.stepped(0.010, samples=8)
    >>> sum(fetch.counts), sum(step.counts), progress.samples
    (1, 1, 8)
    """

    __slots__ = ("_boundary", "_fetch", "_on_first_step", "_phase_histogram", "_progress",
                 "_step")

    def __init__(self, fetch: Histogram, step: Histogram, progress: Progress,
                 on_first_step: Callable[[], None] | None = None,
                 phase_histogram: Callable[[str], Histogram] | None = None,
                 boundary: StepBoundary = NEVER) -> None:
        self._fetch = fetch
        self._step = step
        self._progress = progress
        self._on_first_step = on_first_step  # notes the GPUs once the model is on them
        self._phase_histogram = phase_histogram
        self._boundary = boundary  # a profile request, acted on between steps

    def fetched(self, seconds: float) -> None:
        """One step's time waiting for its batch."""
        self._fetch.observe(seconds)

    def observe(self, phase: str, seconds: float) -> None:
        """A host-side phase measured by the integration (wall clock), for a phase whose end
        is only known when it has ended: ``with trial.phase(...)`` cannot time it."""
        if self._phase_histogram is not None:
            self._phase_histogram(phase).observe(seconds)

    def stepped(self, seconds: float, samples: int) -> None:
        """One finished step: its whole duration (data loading included) and its samples."""
        if self._on_first_step is not None:
            on_first_step, self._on_first_step = self._on_first_step, None
            on_first_step()
        self._step.observe(seconds)
        self._progress.samples += samples
        if self._boundary.armed:
            self._boundary.step_ended()


class NoopStepRecorder(StepRecorder):
    """The unconfigured trial's recorder: does nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        pass  # holds nothing: every call is a no-op

    def fetched(self, seconds: float) -> None:
        return None

    def observe(self, phase: str, seconds: float) -> None:
        return None

    def stepped(self, seconds: float, samples: int) -> None:
        return None
