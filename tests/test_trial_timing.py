"""Phase timers, the loader wrapper, the rendered families, no-op and pull mode."""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

import trial_instrumentation as ti
from benchmarks.cpu import spin
from benchmarks.stack import http_get, promtool
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.loader import batch_size_of
from trial_instrumentation.timing import Histogram, NoopPhase, Phase
from trial_instrumentation.trial import MAX_LOGGED_BAD_NAMES

PHASE_COUNT = "trainwatch_trial_phase_seconds_count"


def pull_trial(**kwargs: object) -> ti.Trial:
    """An enabled trial that pushes nowhere: pull mode on a free port."""
    return ti.Trial(experiment="e", trial="t", pull_port=0, **kwargs)  # type: ignore[arg-type]


def value(trial: ti.Trial, name: str, **labels: str) -> float | None:
    return trial.registry.get_sample_value(name, {"experiment": "e", "trial": "t", "rank": "0",
                                                  **labels})


def test_bucket_bounds_are_inclusive_like_prometheus_le() -> None:
    state = TrialState((0.1, 1.0), {})
    for seconds in (0.1, 0.1000001, 1.0, 7.0):
        state.phase_histogram("p").observe(seconds)
    registry = CollectorRegistry()
    registry.register(TrialCollector(state))
    bucket = "trainwatch_trial_phase_seconds_bucket"
    assert [registry.get_sample_value(bucket, {"phase": "p", "le": le})
            for le in ("0.1", "1.0", "+Inf")] == [1, 3, 4]
    assert registry.get_sample_value("trainwatch_trial_phase_seconds_sum", {"phase": "p"}) \
        == pytest.approx(8.2000001)


@pytest.mark.parametrize(("setting", "env", "phase_les"), [
    (None, None, ["0.1", "1.0", "+Inf"]),  # unset: the step histogram's bounds
    ("none", None, ["+Inf"]),  # fleet scale: sums and counts only
    ([], None, ["+Inf"]),
    (None, " None ", ["+Inf"]),
    (None, "0.5", ["0.5", "+Inf"]),
    ([0.25, 2], "0.5", ["0.25", "2.0", "+Inf"]),  # the argument wins over the variable
])
def test_phase_buckets_cut_the_phase_histograms_only(
        monkeypatch: pytest.MonkeyPatch, setting: object, env: str | None,
        phase_les: list[str]) -> None:
    if env is not None:
        monkeypatch.setenv(ti.names.ENV_PHASE_BUCKETS, env)
    trial = pull_trial(buckets=[0.1, 1], phase_buckets=setting)
    with trial.phase(ti.TRAIN_BATCH):
        pass
    trial._state.step.observe(0.5)  # the step histogram keeps its bounds whatever the phases'
    samples = [s for m in trial.registry.collect() for s in m.samples]
    les = {name: [s.labels["le"] for s in samples if s.name == f"{name}_bucket"]
           for name in (ti.names.PHASE_SECONDS, ti.names.STEP_SECONDS)}
    assert les == {ti.names.PHASE_SECONDS: phase_les,
                   ti.names.STEP_SECONDS: ["0.1", "1.0", "+Inf"]}
    # What the shares, the alerts and diagnose read is there either way.
    assert value(trial, f"{ti.names.PHASE_SECONDS}_count", phase=ti.TRAIN_BATCH) == 1
    assert value(trial, f"{ti.names.PHASE_SECONDS}_bucket", phase=ti.TRAIN_BATCH, le="+Inf") == 1
    assert value(trial, f"{ti.names.PHASE_SECONDS}_sum", phase=ti.TRAIN_BATCH) is not None
    trial.close()


def test_default_buckets_span_half_a_millisecond_to_a_minute() -> None:
    buckets = ti.DEFAULT_BUCKETS
    assert buckets[0] == 0.0005 and 60 <= buckets[-1] < 120
    assert all(b / a == pytest.approx(2) for a, b in itertools.pairwise(buckets))


def test_phase_is_reentrant_a_decorator_and_times_failures() -> None:
    phase = Phase("p", Histogram(ti.DEFAULT_BUCKETS))

    @phase
    def recurse(depth: int) -> int:
        spin(0.002)
        return depth if depth == 0 else recurse(depth - 1)

    assert recurse(2) == 0
    assert sum(phase.histogram.counts) == 3
    # Three nested levels of >= 2, 4 and 6 ms: the sum shows each level was timed from its own
    # start, not from the innermost one.
    assert phase.histogram.sum >= 0.012
    with pytest.raises(KeyError), phase:
        raise KeyError("boom")
    assert sum(phase.histogram.counts) == 4


class FakeClock:
    """perf_counter() stand-in that answers the times it is given, in order."""

    def __init__(self, *times: float) -> None:
        self._times = iter(times)

    def __call__(self) -> float:
        return next(self._times)


def test_each_nested_level_is_timed_from_its_own_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # Levels entered at 1, 21 and 41 s and left at 50, 60 and 70 s last 9, 39 and 69 s
    # (innermost first): each exit must restore the start of the level it returns to.
    monkeypatch.setattr("trial_instrumentation.timing.perf_counter",
                        FakeClock(1.0, 21.0, 41.0, 50.0, 60.0, 70.0))
    phase = Phase("p", Histogram((10.0, 30.0, 40.0, 50.0, 60.0)))
    with phase:
        with phase:
            with phase:
                pass
            assert phase.histogram.counts == [1, 0, 0, 0, 0, 0]  # 50 - 41
        assert phase.histogram.counts == [1, 0, 1, 0, 0, 0]  # 60 - 21
    assert phase.histogram.counts == [1, 0, 1, 0, 0, 1]  # 70 - 1
    assert phase.histogram.sum == 9 + 39 + 69
    # Closed again: the next use starts afresh instead of inheriting a stale start.
    monkeypatch.setattr("trial_instrumentation.timing.perf_counter", FakeClock(100.0, 125.0))
    with phase:
        pass
    assert phase.histogram.counts == [1, 1, 1, 0, 0, 1]


def test_loader_times_fetch_inside_the_step_and_counts_exactly() -> None:
    def slow_batches():  # type: ignore[no-untyped-def]
        for _ in range(4):
            spin(0.01)
            yield [[0.0] * 3] * 6  # six samples of three features: ambiguous, hence samples=6

    trial = pull_trial()
    for _ in trial.loader(slow_batches(), samples=6):
        with trial.phase(ti.TRAIN_BATCH):
            spin(0.005)
    fetch = value(trial, "trainwatch_trial_phase_seconds_sum", phase=ti.DATALOADER_NEXT)
    step = value(trial, "trainwatch_trial_step_seconds_sum")
    train = value(trial, "trainwatch_trial_phase_seconds_sum", phase=ti.TRAIN_BATCH)
    assert fetch is not None and step is not None and train is not None
    assert fetch >= 0.04 and step >= fetch + train
    assert value(trial, PHASE_COUNT, phase=ti.DATALOADER_NEXT) == 4  # no count for the end
    assert value(trial, "trainwatch_trial_step_seconds_count") == 4
    assert value(trial, "trainwatch_trial_steps_total") == 4
    assert value(trial, "trainwatch_trial_samples_total") == 24


def test_loader_counts_a_step_left_by_break() -> None:
    trial = pull_trial()
    for i, _ in enumerate(trial.loader(range(100), samples=2)):
        if i == 2:
            break
    assert value(trial, "trainwatch_trial_steps_total") == 3
    assert value(trial, "trainwatch_trial_samples_total") == 6
    assert value(trial, "trainwatch_trial_step_seconds_count") == 3


@pytest.mark.parametrize(("batch", "size"), [
    (([1, 2, 3], [0, 1, 0]), 3), ([1, 2], 2), ({"x": [[1], [2]], "y": [0, 1]}, 2), (7, 1),
    (([[1, 2], [3, 4], [5, 6]], [0, 1, 0]), 3)])
def test_batch_size_of_plain_batches(batch: object, size: int) -> None:
    assert batch_size_of(batch) == size


def test_batch_size_of_tensors() -> None:
    torch = pytest.importorskip("torch")
    assert batch_size_of((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_size_of(((torch.zeros(6, 3), torch.zeros(6, 3)), torch.zeros(6))) == 6
    assert batch_size_of({"input_ids": torch.zeros(4, 128)}) == 4


def test_rendered_metrics_pass_promtool() -> None:
    trial = pull_trial()
    for _ in trial.loader(range(3), samples=1):
        for name in ti.STANDARD_PHASES[1:]:
            with trial.phase(name):
                pass
    text = generate_latest(trial.registry)
    promtool("check", "metrics", stdin=text.decode())
    for phase in ti.STANDARD_PHASES:
        assert value(trial, PHASE_COUNT, phase=phase) == 3
    assert value(trial, "trainwatch_trial_push_failures_total") == 0


def test_unconfigured_trial_is_a_no_op() -> None:
    threads = threading.active_count()
    data = [1, 2, 3]
    with ti.Trial(experiment="e", trial="t") as trial:
        assert trial.loader(data) is data
        assert isinstance(trial.phase(ti.TRAIN_BATCH), NoopPhase)
        with trial.phase(ti.TRAIN_BATCH):
            pass

        def fn() -> None: ...
        assert trial.timed("evaluate")(fn) is fn
        assert threading.active_count() == threads  # no pusher, no server
    assert generate_latest(trial.registry) == b""


def test_pull_mode_serves_metrics_with_the_trial_labels() -> None:
    with pull_trial() as trial:
        for _ in trial.loader(range(2), samples=1):
            pass
        status, body = http_get(f"http://127.0.0.1:{trial.pull_port}/metrics")
    assert status == 200
    assert b'trainwatch_trial_steps_total{experiment="e",rank="0",trial="t"} 2.0' in body
    with pytest.raises(OSError):
        http_get(f"http://127.0.0.1:{trial.pull_port}/metrics", timeout=1)


def test_cuda_modes_fall_back_to_wall_without_cuda(caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: tests/test_trial_cuda.py covers the real modes")
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        trial = pull_trial(timing_mode=ti.CUDA_EVENTS)
    assert type(trial.phase(ti.TRAIN_BATCH)) is Phase
    assert "needs CUDA" in caplog.text
    trial.close()


def test_phase_hot_path_allocates_nothing_and_no_prometheus_objects(
        monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    hot_thread = threading.get_ident()

    def counting(init: Callable[..., None]) -> Callable[..., None]:
        def counted(self: object, *args: object, **kwargs: object) -> None:
            if threading.get_ident() == hot_thread:  # not another test's live pusher thread
                created.append(type(self).__name__)
            init(self, *args, **kwargs)
        return counted

    for cls in (MetricWrapperBase, Metric):  # every prometheus_client metric and family
        monkeypatch.setattr(cls, "__init__", counting(cls.__init__))
    trial = pull_trial()
    phase = trial.phase(ti.TRAIN_BATCH)
    assert trial.phase(ti.TRAIN_BATCH) is phase  # one precomputed object per name

    def run(times: int) -> None:
        for _ in range(times):
            with phase:
                pass

    # Only the hot path's own module: another test's pusher thread, still alive in this
    # process, allocates in pusher.py/transport.py meanwhile (2.2-2.8 kB in clean-clone runs).
    package = [tracemalloc.Filter(True, str(Path(ti.__file__).parent / "timing.py"))]
    tracemalloc.start()
    try:
        run(1_000)  # warm: the list of open starts has reached its size
        # Collected first: another test's pusher thread may still hold a failed push's
        # exception cycle (~2 kB, freed only when the cyclic GC runs); a leak survives collect().
        gc.collect()
        before = tracemalloc.take_snapshot().filter_traces(package)
        run(10_000)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(package)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    # One object kept per phase would be >= 160 kB here; the live sum and counts stay put.
    assert grown < 512, f"{grown} bytes still allocated by trial_instrumentation"
    assert created == [], created
    assert value(trial, PHASE_COUNT, phase=ti.TRAIN_BATCH) == 11_000
    assert created  # the collector does create families, at collect time only


@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "no-op"])
def test_bad_phase_name_is_logged_once_and_never_raises(caplog: pytest.LogCaptureFixture,
                                                        enabled: bool) -> None:
    trial = pull_trial() if enabled else ti.Trial(experiment="e", trial="t")
    bad_names: list[object] = ["", None, 7, ["train_batch"]]  # a list is not even hashable
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation"):
        for _ in range(3):
            for name in bad_names:
                with trial.phase(name):  # type: ignore[arg-type]
                    spin(0.0001)
        assert trial.timed("")(len)("abc") == 3
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == len(bad_names), logged
    for name, message in zip(bad_names, logged):
        assert f"phase name {name!r} is not a non-empty string" in message
    phases = {s.labels.get("phase") for m in trial.registry.collect() for s in m.samples}
    assert phases <= {None}, phases  # no series for a bad name


def test_bad_phase_names_made_per_step_stop_logging(caplog: pytest.LogCaptureFixture) -> None:
    trial = pull_trial()
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation"):
        for step in range(100):
            with trial.phase(step):  # type: ignore[arg-type]
                pass
    assert len(caplog.records) == MAX_LOGGED_BAD_NAMES


def test_phase_buckets_like_bisect_when_durations_jump(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phase tries its previous bucket first; every duration must still land where
    Histogram.observe (a plain bisect) puts it, on a bound or either side of one."""
    from trial_instrumentation import timing
    durations = [0.1, 0.1, 0.1000001, 1.0, 0.1, 0.05, 7.0, 7.0, 1.0, 0.0]
    clock = iter(itertools.chain.from_iterable((0.0, d) for d in durations))
    monkeypatch.setattr(timing, "perf_counter", lambda: next(clock))
    phase, reference = Phase("p", Histogram((0.1, 1.0))), Histogram((0.1, 1.0))
    for seconds in durations:
        with phase:
            pass
        reference.observe(seconds)
    assert phase.histogram.counts == reference.counts == [5, 3, 2]


def test_loader_buckets_like_bisect_when_durations_jump(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader also tries each histogram's previous bucket first (see the phase test)."""
    from trial_instrumentation import loader
    fetches = [0.25, 0.5, 0.25, 0.125, 2.0, 1.0]  # dyadic: the clock's sums stay exact
    steps = [1.0, 1.0, 0.25, 4.0, 2.0, 1.0]
    ticks, start = [0.0], 0.0
    for fetched, stepped in zip(fetches, steps):
        ticks += [start + fetched, start + stepped]
        start += stepped
    monkeypatch.setattr(loader, "perf_counter", iter(ticks).__next__)
    fetch, step = Histogram((0.25, 1.0)), Histogram((0.25, 1.0))
    for _ in loader.TimedLoader(range(len(steps)), fetch, step, loader.Progress(), samples=1):
        pass
    for histogram, durations in ((fetch, fetches), (step, steps)):
        reference = Histogram((0.25, 1.0))
        for seconds in durations:
            reference.observe(seconds)
        assert histogram.counts == reference.counts
    assert (fetch.counts, step.counts) == ([3, 2, 1], [1, 3, 2])
