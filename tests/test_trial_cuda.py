"""CUDA timing modes, GPU identity and the profiler trace's GPU split, on a real GPU; skipped
without CUDA."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import trial_instrumentation as ti

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
SUM = "trainwatch_trial_phase_seconds_sum"
LABELS = {"experiment": "e", "trial": "t", "rank": "0", "phase": ti.TRAIN_BATCH}


def gpu_work(x: Any) -> None:
    for _ in range(40):
        x = (x @ x) / x.shape[0]  # stays finite; ~0.1 s of GPU time for 4096x4096


def timed(mode: str) -> tuple[float, float, ti.Trial]:
    """(wall time of the `with` block, observed phase seconds, trial) for one timing mode."""
    trial = ti.Trial(experiment="e", trial="t", pull_port=0, timing_mode=mode).start()
    x = torch.randn(4096, 4096, device="cuda")
    gpu_work(x)  # warm up cuBLAS outside the measurement
    torch.cuda.synchronize()
    started = time.perf_counter()
    with trial.phase(ti.TRAIN_BATCH):
        gpu_work(x)
    block = time.perf_counter() - started
    torch.cuda.synchronize()
    trial.close()  # drains the event resolver
    return block, trial.registry.get_sample_value(SUM, LABELS) or 0.0, trial


def test_cuda_events_measure_gpu_time_without_stalling_the_loop() -> None:
    block, observed, _ = timed(ti.CUDA_EVENTS)
    # The training thread only enqueued; the events still saw the kernels' full duration.
    assert observed > 0.02 and observed > 5 * block, (block, observed)


def test_cuda_sync_waits_for_the_kernels() -> None:
    block, observed, _ = timed(ti.CUDA_SYNC)
    assert observed > 0.02 and block >= observed * 0.9, (block, observed)


def test_wall_mode_measures_only_the_enqueue() -> None:
    _, observed, _ = timed(ti.WALL)
    _, events_observed, _ = timed(ti.CUDA_EVENTS)
    assert observed < events_observed / 5, (observed, events_observed)


def test_gpu_info_carries_the_nvml_uuid() -> None:
    _, _, trial = timed(ti.WALL)
    uuids = [s.labels["uuid"] for m in trial.registry.collect() for s in m.samples
             if s.name == "trainwatch_trial_gpu_info"]
    assert len(uuids) == 1 and uuids[0].startswith(("GPU-", "MIG-")), uuids
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    index = torch.cuda.current_device()
    bus = torch.cuda.get_device_properties(index)
    nvml = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
    assert uuids[0] == (nvml.decode() if isinstance(nvml, bytes) else nvml), bus


def test_cuda_events_adjacent_phases_tile_the_gpu_time() -> None:
    """Back-to-back phases share boundary events: together they cover exactly the GPU time
    between the first one's start and the last one's end, each its own kernels."""
    trial = ti.Trial(experiment="e", trial="t", pull_port=0, timing_mode=ti.CUDA_EVENTS).start()
    x = torch.randn(4096, 4096, device="cuda")
    gpu_work(x)
    torch.cuda.synchronize()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    with trial.phase(ti.TRAIN_BATCH):
        gpu_work(x)
    with trial.phase(ti.STEP_LR_SCHEDULERS):
        gpu_work(x)
        gpu_work(x)
    last.record()
    torch.cuda.synchronize()
    trial.close()
    observed = {phase: trial.registry.get_sample_value(SUM, {**LABELS, "phase": phase}) or 0.0
                for phase in (ti.TRAIN_BATCH, ti.STEP_LR_SCHEDULERS)}
    total = first.elapsed_time(last) / 1000
    assert sum(observed.values()) == pytest.approx(total, rel=0.02), (observed, total)
    assert observed[ti.STEP_LR_SCHEDULERS] == pytest.approx(2 * observed[ti.TRAIN_BATCH],
                                                            rel=0.2), observed


def test_cuda_events_are_recorded_on_the_stream_current_at_each_phase() -> None:
    """The recorder keeps one Stream while the current stream stays the same: a phase under
    ``torch.cuda.stream(side)``, after one on the default stream, times the side stream's
    kernels (recorded on the idle default stream, it would read about 0), and the next phase,
    back on the default stream, does not wait for work still running on the side stream."""
    trial = ti.Trial(experiment="e", trial="t", pull_port=0, timing_mode=ti.CUDA_EVENTS).start()
    x = torch.randn(4096, 4096, device="cuda")
    gpu_work(x)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with trial.phase(ti.TO_DEVICE):  # the default stream's Stream is made here
        pass
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with trial.phase(ti.TRAIN_BATCH):
            gpu_work(x)
        gpu_work(x)  # still running on the side stream while the next phase opens
    with trial.phase(ti.REDUCE_METRICS):
        pass
    torch.cuda.synchronize()
    trial.close()
    seconds = {phase: trial.registry.get_sample_value(SUM, {**LABELS, "phase": phase})
               for phase in (ti.TO_DEVICE, ti.TRAIN_BATCH, ti.REDUCE_METRICS)}
    assert seconds[ti.TRAIN_BATCH] > 0.02, seconds
    assert seconds[ti.REDUCE_METRICS] is not None and seconds[ti.REDUCE_METRICS] < 0.005, seconds


def test_a_profile_splits_gpu_time_launch_bound_mostly_idle_gpu_bound_mostly_compute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The on-demand trace's idle/compute/communication split on the GPU's streams
    (trial_instrumentation.trace_split): a small MLP's many tiny kernels leave the stream idle
    between launches most of the time; three 4096² matmuls a step keep it computing."""
    from benchmarks.cuda_events import gpu_bound, launch_bound
    from benchmarks.profile_summary import summary
    from trainwatch.diagnose.traces import trace_line
    from trial_instrumentation import names

    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path))  # restored after summary() sets it
    shares = {}
    for kind, make in (("launch-bound", launch_bound), ("gpu-bound", gpu_bound)):
        found = summary(make(), 5, str(tmp_path))
        assert found.split_device == "cuda", (kind, found)
        shares[kind] = found.split_shares()
        assert shares[kind]["communication"] == 0, (kind, shares)  # no collective in either
        assert "; GPU idle " in trace_line("0", found)
        assert trace_line("0", found).endswith(f": launch-bound ({found.path})") is (
            kind == "launch-bound")
    assert shares["launch-bound"]["idle"] > 0.5, shares
    assert shares["gpu-bound"]["compute"] > 0.9, shares
