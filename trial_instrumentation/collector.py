"""Render the hot-path arrays into metric families, at push (or scrape) time only.

The training thread never touches prometheus_client objects: this collector, registered in
the trial's private ``CollectorRegistry``, reads plain lists and ints when the pusher thread
(or the pull server) asks for ``/metrics``. Names come from :mod:`trial_instrumentation.names`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from trial_instrumentation import names
from trial_instrumentation.loader import Progress
from trial_instrumentation.parsers import shown
from trial_instrumentation.timing import Histogram

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _le_labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    return (*(floatToGoString(b) for b in bounds), "+Inf")


def cumulative_buckets(histogram: Histogram) -> tuple[list[tuple[str, float]], float]:
    """``(le, cumulative count)`` pairs and the sum, from one consistent-enough snapshot."""
    counts, total = histogram.snapshot()
    running, buckets = 0, []
    for le, count in zip(_le_labels(histogram.bounds), counts):
        running += count
        buckets.append((le, float(running)))
    return buckets, total


LIMIT_DOCS = {
    names.LOADER_LIMIT: "Samples per second the data loader delivers alone, as measured.",
    names.STEP_LIMIT: "Samples per second the training step consumes alone, as measured.",
}


@dataclass
class TrialState:
    """What a trial measures; the hot path writes it, :class:`TrialCollector` reads it."""

    buckets: tuple[float, ...]
    info: Mapping[str, str]
    phases: dict[str, Histogram] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    push_failures: int = 0
    gpu_uuids: Callable[[], Iterable[str]] = tuple
    limits: dict[str, float] = field(default_factory=dict)  # names.*_LIMIT -> samples/s
    exit_reason: str | None = None  # names.EXIT_*, set just before the final push
    phase_buckets: tuple[float, ...] | None = None  # None: ``buckets``; (): +Inf only
    started_at: float | None = None  # Unix time of Trial.start(); None: not started
    push_interval: float | None = None  # seconds between pushes; None: not pushing (pull)
    model_flops: tuple[str, float] | None = None  # (precision, FLOPs per sample), if known
    compute_threads: int | None = None  # torch.get_num_threads(); None: torch not imported
    # Born at zero: the phases delivered so far, and the steps the last collection delivered.
    # A phase first timed after steps were already delivered (a validation phase, a phase
    # after warm-up) is delivered at 0 once, then counted, so rate() sees its first
    # increments instead of taking them as its starting value. Phases timed from the first
    # steps on come with them: the rules read a run younger than the rate window from its
    # counters' values (prometheus/rulegen/window.py), and holding them back would zero
    # every share for one push.
    announced: set[str] = field(default_factory=set)
    steps_delivered: float = 0.0
    dropped_phase: str | None = None  # the first phase name past names.MAX_PHASES, if any
    # cuda_events: resolves the finished event pairs into the phase histograms, called at
    # each collection (push or scrape) so a slow loop's last steps are never held back.
    resolve_pending: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        self.step = Histogram(self.buckets)

    def phase_histogram(self, name: str) -> Histogram:
        """Phase ``name``'s histogram, made at its first use; a name :meth:`admits` refuses
        gets a detached one that is never collected."""
        histogram = self.phases.get(name)
        if histogram is None:
            histogram = Histogram(self.buckets if self.phase_buckets is None
                                  else self.phase_buckets)
            if self.admits(name):
                self.phases[name] = histogram
        return histogram

    def admits(self, name: str) -> bool:
        """Whether phase ``name`` is timed: the standard phases always, at most
        ``names.MAX_PHASES`` others. Asked when a phase is first used, never per observation;
        the first name refused is logged, once."""
        if name in self.phases or name in names.ALWAYS_TIMED_PHASES:
            return True
        if self.dropped_phase is not None:  # full, and it stays full: no phase leaves
            return False
        standard = sum(phase in self.phases for phase in names.ALWAYS_TIMED_PHASES)
        if len(self.phases) - standard < names.MAX_PHASES:
            return True
        self.dropped_phase = name
        log.warning("trainwatch: phase %s is not timed: this trial already times %d phase "
                    "names besides the standard ones, the limit (names.MAX_PHASES); a name "
                    "made per step or per item is a bug. Later new names are not timed "
                    "either, and not logged", shown(name), names.MAX_PHASES)
        return False


class TrialCollector(Collector):
    """Yields the trial families from a :class:`TrialState`.

    ``const_labels`` go on every series: empty when pushing (the grouping key labels the
    group), experiment/trial/rank in pull mode.

    Every phase is born at zero: one first timed after a collection that delivered steps is
    delivered at 0 in the next collection and counted from the one after (the final push
    always counts), so Prometheus's ``rate()`` sees all of its time; phases timed from the
    first steps on are delivered as they are (see ``TrialState.announced``).

    >>> from prometheus_client import CollectorRegistry
    >>> state = TrialState(names.DEFAULT_BUCKETS, {"nodename": "n", "pid": "1", "world_size": "1"})
    >>> state.phase_histogram("train_batch").observe(0.01)
    >>> registry = CollectorRegistry()
    >>> registry.register(TrialCollector(state))
    >>> registry.get_sample_value("trainwatch_trial_phase_seconds_count", {"phase": "train_batch"})
    1.0
    """

    def __init__(self, state: TrialState, const_labels: Mapping[str, str] | None = None) -> None:
        self._state = state
        self._keys = list(const_labels or {})
        self._values = list((const_labels or {}).values())

    def _family(self, cls: type[Metric], name: str, doc: str, *labels: str) -> Metric:
        return cls(name, doc, labels=[*self._keys, *labels])  # type: ignore[call-arg]

    def collect(self) -> Iterator[Metric]:
        state, values = self._state, self._values
        if state.resolve_pending is not None:
            state.resolve_pending()
        phase = self._family(HistogramMetricFamily, names.PHASE_SECONDS,
                             "Time spent in one phase of a training step.", "phase")
        late = state.steps_delivered > 0 and state.exit_reason is None
        # tuple(): the training thread may add a phase while we iterate.
        for name, histogram in tuple(state.phases.items()):
            buckets, total = cumulative_buckets(histogram)
            if late and name not in state.announced:
                buckets, total = [(le, 0.0) for le, _ in buckets], 0.0  # born at zero
            state.announced.add(name)
            phase.add_metric([*values, name], buckets, total)  # type: ignore[attr-defined]
        yield phase
        step = self._family(HistogramMetricFamily, names.STEP_SECONDS,
                            "Time of one whole training iteration, data loading included.")
        step_buckets, step_sum = cumulative_buckets(state.step)
        state.steps_delivered = step_buckets[-1][1]
        step.add_metric(values, step_buckets, step_sum)  # type: ignore[attr-defined]
        yield step
        # A finished step is one step observation: the steps counter is the +Inf bucket, from
        # the same snapshot, so it always equals trainwatch_trial_step_seconds_count.
        for metric, doc, value in (
                (names.STEPS, "Training steps finished.", step_buckets[-1][1]),
                (names.SAMPLES, "Training samples in finished steps.", state.progress.samples),
                (names.PUSH_FAILURES, "Pushes to the Pushgateway that failed.",
                 state.push_failures)):
            counter = self._family(CounterMetricFamily, metric, doc)
            counter.add_metric(values, value)  # type: ignore[attr-defined]
            yield counter
        info = self._family(GaugeMetricFamily, names.TRIAL_INFO,
                            "The trial process; join to trainwatch_host_info on nodename.",
                            *state.info)
        info.add_metric([*values, *state.info.values()], 1)  # type: ignore[attr-defined]
        yield info
        gpus = self._family(GaugeMetricFamily, names.GPU_INFO,
                            "A GPU this trial uses; join to trainwatch_gpu_* on uuid.", "uuid")
        for uuid in state.gpu_uuids():
            gpus.add_metric([*values, uuid], 1)  # type: ignore[attr-defined]
        yield gpus
        if state.started_at is not None:
            started = self._family(GaugeMetricFamily, names.START_TIME,
                                   "Unix time the trial process started timing.")
            started.add_metric(values, state.started_at)  # type: ignore[attr-defined]
            yield started
        if state.push_interval is not None:
            every = self._family(GaugeMetricFamily, names.PUSH_INTERVAL,
                                 "Seconds between the trial's pushes (trainwatch gc keeps the "
                                 "group for two of them).")
            every.add_metric(values, state.push_interval)  # type: ignore[attr-defined]
            yield every
        if state.exit_reason is not None:
            ended = self._family(GaugeMetricFamily, names.EXIT, "How the trial's process ended "
                                 "(clean, terminated, failed); in the final push only.", "reason")
            ended.add_metric([*values, state.exit_reason], 1)  # type: ignore[attr-defined]
            yield ended
        if state.model_flops is not None:
            model = self._family(GaugeMetricFamily, names.MODEL_FLOPS, "The model's training "
                                 "FLOPs (forward + backward) per sample, in the precision its "
                                 "matmuls run in.", "precision")
            model.add_metric([*values, state.model_flops[0]],  # type: ignore[attr-defined]
                             state.model_flops[1])
            yield model
        if state.compute_threads is not None:
            threads = self._family(GaugeMetricFamily, names.COMPUTE_THREADS, "torch's "
                                   "intra-op threads (torch.get_num_threads()) in training.")
            threads.add_metric(values, state.compute_threads)  # type: ignore[attr-defined]
            yield threads
        for name, doc in LIMIT_DOCS.items():
            if name in state.limits:  # only once measured: no made-up zero
                limit = self._family(GaugeMetricFamily, name, doc)
                limit.add_metric(values, state.limits[name])  # type: ignore[attr-defined]
                yield limit
