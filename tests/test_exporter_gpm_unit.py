"""exporter.gpm's GpmSampler driven directly over the fake NVML: every metric's value and
divisor, the two samples it reuses, what a refused or failed sample does to the next read,
and the results layout read against ctypes' own view of the structure."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pynvml
import pytest

from benchmarks.fake_nvml import FakeGpu, FakeNvml
from exporter import gpm
from exporter import metrics as m
from exporter.gpm import GPM_METRICS, GpmSampler, gpm_supported

RATES = {pynvml.NVML_GPM_METRIC_SM_UTIL: 23.5, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 3.25,
         pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 41.0, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 9.5,
         pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.75, pynvml.NVML_GPM_METRIC_FP32_UTIL: 12.0,
         pynvml.NVML_GPM_METRIC_FP16_UTIL: 5.5, pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 2.25}


def gpm_board(**values: Any) -> tuple[FakeNvml, FakeGpu]:
    values = {"gpm": dict(RATES), "pcie_kbps": (3072, 5120), "nvlink_mibps": (7.5, 11.0),
              **values}
    board = FakeGpu(index=0, **values)
    return FakeNvml([board]), board


def test_the_first_read_samples_and_the_second_gives_every_metric_in_base_units() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    assert sampler.supported is None
    assert sampler.read(board) == []
    assert sampler.supported is True
    nvml.advance(4)
    assert sampler.read(board) == [
        (m.GPU_SM_ACTIVE, (), 0.235), (m.GPU_SM_OCCUPANCY, (), 0.0325),
        (m.GPU_TENSOR_ACTIVE, (), 0.41), (m.GPU_DRAM_ACTIVE, (), 0.095),
        (m.GPU_PIPE_ACTIVE, ("fp64",), 0.0075), (m.GPU_PIPE_ACTIVE, ("fp32",), 0.12),
        (m.GPU_PIPE_ACTIVE, ("fp16",), 0.055), (m.GPU_PIPE_ACTIVE, ("integer",), 0.0225),
        (m.GPU_PCIE_TX, (), 3072 * 1024.0), (m.GPU_PCIE_RX, (), 5120 * 1024.0),
        (m.GPU_NVLINK_TX, (), 7.5 * 2**20), (m.GPU_NVLINK_RX, (), 11.0 * 2**20)]


def test_the_divisors() -> None:
    assert gpm.PERCENT == 100.0 and gpm.PER_MIB == 2.0 ** -20
    assert gpm.PCIE_SPECS == (m.GPU_PCIE_TX, m.GPU_PCIE_RX)
    assert len(GPM_METRICS) == 12 and len({metric for metric, *_ in GPM_METRICS}) == 12


def test_two_samples_serve_every_read() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    for _ in range(6):
        nvml.advance(1)
        sampler.read(board)
    assert nvml.calls["nvmlGpmSampleAlloc"] == 2
    assert nvml.calls["nvmlGpmSampleGet"] == 6 and nvml.calls["nvmlGpmMetricsGet"] == 5
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 1  # asked once


def test_each_read_covers_the_time_since_the_previous_one() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.read(board)
    assert board.gpm is not None
    board.gpm[pynvml.NVML_GPM_METRIC_SM_UTIL] = 10.0
    nvml.advance(3)
    board.gpm[pynvml.NVML_GPM_METRIC_SM_UTIL] = 70.0
    nvml.advance(1)
    assert {s: v for s, labels, v in sampler.read(board) if not labels}[
        m.GPU_SM_ACTIVE] == pytest.approx(0.25)
    nvml.advance(2)
    assert {s: v for s, labels, v in sampler.read(board) if not labels}[
        m.GPU_SM_ACTIVE] == pytest.approx(0.7)


def test_a_board_without_gpm_is_asked_once_and_never_sampled() -> None:
    nvml, board = gpm_board()
    board.gpm = None
    sampler = GpmSampler(nvml)
    for _ in range(3):
        assert sampler.read(board) == []
    assert sampler.supported is False
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 1
    assert nvml.calls["nvmlGpmSampleAlloc"] == 0 and nvml.calls["nvmlGpmSampleGet"] == 0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED,
                                  pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_support_that_cannot_be_asked_is_no_support(code: int) -> None:
    class Refusing:
        def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
            raise pynvml.NVMLError(code)

    assert gpm_supported(Refusing(), object()) is False
    assert gpm_supported(object(), object()) is False  # nvidia-ml-py without GPM


def test_a_failing_gpu_fails_the_support_question() -> None:
    nvml, board = gpm_board()
    board.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        gpm_supported(nvml, board)


def test_a_refused_sample_switches_gpm_off_for_the_gpu() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.read(board)
    nvml.advance(1)
    board.unsupported = frozenset({"nvmlGpmSampleGet"})  # e.g. MIG mode switched on
    assert sampler.read(board) == []
    assert sampler.supported is False
    board.unsupported = frozenset()
    nvml.advance(1)
    assert sampler.read(board) == []  # off for good
    assert nvml.calls["nvmlGpmSampleGet"] == 2 and nvml.calls["nvmlGpmMetricsGet"] == 0


def test_a_failed_sample_raises_and_the_next_read_starts_a_fresh_interval() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.read(board)
    nvml.advance(1)
    board.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sampler.read(board)
    assert sampler.supported is True
    board.lost = False
    nvml.advance(1)
    assert sampler.read(board) == []  # the sample before the failure is not used
    nvml.advance(1)
    assert len(sampler.read(board)) == 12


def test_a_failed_sample_frees_the_sample_it_drops_so_failures_hold_no_more_samples() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    for _ in range(2):
        nvml.advance(1)
        sampler.read(board)
    assert nvml.gpm_samples_held() == 2 and nvml.calls["nvmlGpmSampleFree"] == 0
    for cycle in range(1, 5):
        board.lost = True
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            sampler.read(board)
        assert nvml.calls["nvmlGpmSampleFree"] == cycle
        assert nvml.gpm_samples_held() == 1  # the one just refused, kept for the next read
        board.lost = False
        nvml.advance(1)
        assert sampler.read(board) == []
        nvml.advance(1)
        assert len(sampler.read(board)) == 12  # neither sample in use was freed
        assert nvml.calls["nvmlGpmSampleAlloc"] - nvml.calls["nvmlGpmSampleFree"] == 2
        assert nvml.gpm_samples_held() == 2


def test_a_failed_first_sample_frees_nothing() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.supported = True
    board.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sampler.read(board)
    assert nvml.calls["nvmlGpmSampleFree"] == 0 and nvml.gpm_samples_held() == 1
    board.lost = False
    sampler.read(board)
    nvml.advance(1)
    assert len(sampler.read(board)) == 12
    assert nvml.calls["nvmlGpmSampleAlloc"] == 2


@pytest.mark.parametrize("reads", [1, 2])
def test_a_refused_sample_frees_every_sample_since_gpm_is_off_for_good(reads: int) -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    for _ in range(reads):
        nvml.advance(1)
        sampler.read(board)
    board.unsupported = frozenset({"nvmlGpmSampleGet"})
    assert sampler.read(board) == []
    assert nvml.gpm_samples_held() == 0
    assert nvml.calls["nvmlGpmSampleFree"] == nvml.calls["nvmlGpmSampleAlloc"] == 2


def test_metrics_gpm_cannot_compute_are_left_out_for_that_read() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.read(board)
    real = nvml.nvmlGpmMetricsGet

    def refuse(request: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    nvml.nvmlGpmMetricsGet = refuse  # type: ignore[method-assign]
    nvml.advance(1)
    assert sampler.read(board) == []
    nvml.nvmlGpmMetricsGet = real  # type: ignore[method-assign]
    nvml.advance(1)
    assert len(sampler.read(board)) == 12


def test_a_failure_computing_metrics_is_raised() -> None:
    nvml, board = gpm_board()
    sampler = GpmSampler(nvml)
    sampler.read(board)

    def fail(request: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvml.nvmlGpmMetricsGet = fail  # type: ignore[method-assign]
    with pytest.raises(pynvml.NVMLError_Unknown):
        sampler.read(board)


def test_a_value_that_is_not_finite_is_left_out_alone() -> None:
    nvml, board = gpm_board(nvlink_mibps=None)
    assert board.gpm is not None
    board.gpm[pynvml.NVML_GPM_METRIC_SM_OCCUPANCY] = math.inf
    board.gpm[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] = math.nan
    sampler = GpmSampler(nvml)
    sampler.read(board)
    nvml.advance(2)
    reading = sampler.read(board)
    specs = [spec for spec, _, _ in reading]
    assert m.GPU_SM_OCCUPANCY not in specs and m.GPU_DRAM_ACTIVE not in specs
    assert m.GPU_NVLINK_TX not in specs and m.GPU_NVLINK_RX not in specs  # not supported
    assert specs[:2] == [m.GPU_SM_ACTIVE, m.GPU_TENSOR_ACTIVE] and len(reading) == 8


def test_the_request_names_every_metric_and_is_made_once() -> None:
    nvml, board = gpm_board()
    seen: list[Any] = []
    real = nvml.nvmlGpmMetricsGet

    def record(request: Any) -> Any:
        seen.append(request)
        return real(request)

    nvml.nvmlGpmMetricsGet = record  # type: ignore[method-assign]
    sampler = GpmSampler(nvml)
    for _ in range(3):
        nvml.advance(1)
        sampler.read(board)
    assert len(seen) == 2 and seen[0] is seen[1]
    request = seen[0]
    assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
    assert request.numMetrics == 12
    assert [request.metrics[i].metricId for i in range(12)] == [mid for mid, *_ in GPM_METRICS]


@pytest.mark.parametrize("count", [1, 2, 5, 12])
def test_the_results_layout_reads_what_ctypes_reads(count: int) -> None:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    for i in range(count):
        request.metrics[i].nvmlReturn = 1000 + i
        request.metrics[i].value = 0.5 + 3 * i
    layout = gpm._results_layout(count)
    values = layout.unpack_from(request, pynvml.c_nvmlGpmMetricsGet_t.metrics.offset)
    expected: list[float] = []
    for i in range(count):
        expected += [1000 + i, 0.5 + 3 * i]
    assert list(values) == expected


class PaddedMetric(ctypes.Structure):
    """A result laid out with gaps (code at 8, value at 24): the layout follows the offsets."""

    _fields_ = [("metricId", ctypes.c_uint), ("gap0", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("gap1", ctypes.c_uint * 3), ("value", ctypes.c_double), ("tail", ctypes.c_void_p)]


@pytest.mark.parametrize("count", [1, 3])
def test_the_results_layout_follows_the_structures_offsets_gaps_included(
        count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (PaddedMetric.nvmlReturn.offset, PaddedMetric.value.offset) == (8, 24)
    monkeypatch.setattr(pynvml, "c_nvmlGpmMetric_t", PaddedMetric)
    results = (PaddedMetric * count)()
    for i in range(count):
        results[i].metricId, results[i].gap0 = 900 + i, 800 + i
        results[i].nvmlReturn, results[i].gap1[2] = 1000 + i, 700 + i
        results[i].value = 0.5 + 3 * i
    layout = gpm._results_layout(count)
    expected: list[float] = []
    for i in range(count):
        expected += [1000 + i, 0.5 + 3 * i]
    assert list(layout.unpack_from(results, 0)) == expected
