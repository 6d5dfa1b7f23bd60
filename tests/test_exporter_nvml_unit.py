"""The NVML session (exporter/nvml.py) read directly over the fake NVML: init retried on its
clock and logged once, identities read once, and read_each_gpu's count guess, lost GPUs,
deadlines and stuck lanes, each with distinct values per GPU and part."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import pynvml
import pytest

from benchmarks.fake_nvml import DRIVER_VERSION, FakeNvml, fake_uuid
from exporter.collector import CollectorError, CollectorTimeout
from exporter.lanes import LanePool
from exporter.nvml import GpuIdentity, GpuPart, NvmlSession, text

LOGGER = "exporter.nvml"
HANG = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(nvml: FakeNvml, retry: float = 60.0) -> tuple[NvmlSession, Clock]:
    clock = Clock()
    return NvmlSession(nvml, retry_seconds=retry, clock=clock), clock


def test_a_negative_retry_interval_is_refused_and_zero_is_allowed() -> None:
    with pytest.raises(ValueError, match="-0.5"):
        NvmlSession(FakeNvml.with_gpus(1), retry_seconds=-0.5)
    nvml = FakeNvml.with_gpus(1)
    nvml.library_present = False
    session, _ = _session(nvml, retry=0)
    assert not session.available()
    assert not session.available()  # no wait at all: each call tries again
    assert nvml.calls["nvmlInit"] == 2


def test_text_decodes_old_pynvml_bytes_and_keeps_str() -> None:
    assert text(b"NVIDIA A100") == "NVIDIA A100"
    assert text(b"bad \xff byte") == "bad \ufffd byte"
    assert text("550.54.15") == "550.54.15"


def test_a_failed_init_is_logged_once_and_retried_only_after_the_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.library_present = False
    session, clock = _session(nvml, retry=60.0)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with pytest.raises(CollectorError) as failed:
        session.require()
    assert failed.value.logged is True
    assert str(failed.value).startswith("NVML unavailable (")
    assert str(failed.value).endswith("); no GPU metrics")
    assert session.absent is True
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, f"{failed.value}; host metrics are unaffected, retrying every 60s")]
    caplog.clear()
    clock.now = 1059.5  # before the retry: fails fast, NVML is not asked
    with pytest.raises(CollectorError) as fast:
        session.require()
    assert fast.value.logged is True and str(fast.value) == str(failed.value)
    assert nvml.calls["nvmlInit"] == 1
    clock.now = 1060.0  # the retry is due: asked again, and not logged again
    assert not session.available()
    assert nvml.calls["nvmlInit"] == 2
    assert not caplog.records
    nvml.library_present = True  # the driver is loaded; the next retry is 60 s on
    clock.now = 1119.5
    assert not session.available()
    assert nvml.calls["nvmlInit"] == 2
    clock.now = 1120.0
    assert session.available()
    assert session.absent is False  # loaded since: no longer a node without NVML
    assert session.driver_version == DRIVER_VERSION
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"NVML initialised: driver {DRIVER_VERSION}, 2 GPU(s)")]
    clock.now = 0.0  # initialised stays initialised, whatever the clock says
    assert session.available()
    assert nvml.calls["nvmlInit"] == 3


def test_a_driver_fault_is_not_absent_and_a_bytes_driver_version_is_decoded() -> None:
    nvml = FakeNvml.with_gpus(1)

    def mismatch() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)

    nvml.nvmlInit = mismatch  # type: ignore[method-assign,assignment]
    session, _ = _session(nvml)
    assert not session.available()
    assert session.absent is False
    present = FakeNvml.with_gpus(1)
    present.nvmlSystemGetDriverVersion = lambda: b"535.104.05"  # type: ignore[method-assign]
    ok, _ = _session(present)
    assert ok.available()
    assert ok.driver_version == "535.104.05"
    # Absent, then NVML is found but faulty: no longer absent.
    gone = FakeNvml.with_gpus(1)
    gone.library_present = False
    flip, flip_clock = _session(gone)
    assert not flip.available() and flip.absent
    gone.nvmlInit = mismatch  # type: ignore[method-assign,assignment]
    flip_clock.now += 60
    assert not flip.available() and not flip.absent


def test_a_gpus_identity_is_read_once_and_labels_it() -> None:
    nvml = FakeNvml.with_gpus(3)
    session, _ = _session(nvml)
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    first = session.identity(2, handle)
    assert first == GpuIdentity(index=2, uuid=fake_uuid(2), name="NVIDIA H100 80GB HBM3",
                                pci_bus_id="00000000:19:00.0")
    assert first.labels == ("2", fake_uuid(2))
    assert session.identity(2, handle) is first
    assert nvml.calls["nvmlDeviceGetUUID"] == 1
    other = session.identity(1, nvml.nvmlDeviceGetHandleByIndex(1))
    assert other.uuid == fake_uuid(1)
    assert nvml.calls["nvmlDeviceGetUUID"] == 2


def _parts(nvml: FakeNvml, extra: bool = True) -> Any:
    def main(identity: GpuIdentity, handle: Any) -> list[Any]:
        return [("util", identity.labels, nvml.nvmlDeviceGetUtilizationRates(handle).gpu)]

    def temperature(identity: GpuIdentity, handle: Any) -> list[Any]:
        return [("temp", identity.labels, nvml.nvmlDeviceGetTemperature(handle, 0))]

    def parts(index: int) -> Sequence[GpuPart]:
        return [("", main), ("temp", temperature)] if extra else [("", main)]

    return parts


def _both(index: int) -> list[tuple[str, tuple[str, str], int]]:
    labels = (str(index), fake_uuid(index))
    return [("util", labels, 50 + index), ("temp", labels, 60 + index)]


def _read(session: NvmlSession, nvml: FakeNvml, lanes: LanePool, seconds: float = 5.0,
          extra: bool = True) -> Any:
    return session.read_each_gpu(_parts(nvml, extra), lanes, time.monotonic() + seconds)


def test_every_gpu_is_read_as_the_count_grows_and_shrinks() -> None:
    nvml = FakeNvml.with_gpus(1)
    session, _ = _session(nvml)
    lanes = LanePool("t")
    reads = _read(session, nvml, lanes)  # no guess yet: all after the count
    assert reads.samples == _both(0)
    assert (reads.failures, reads.timeouts) == ([], [])
    nvml.gpus = FakeNvml.with_gpus(3).gpus  # two more: read once each, the first not twice
    reads = _read(session, nvml, lanes)
    assert reads.samples == _both(0) + _both(1) + _both(2)
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 1 + 3
    del nvml.gpus[1:]  # fewer: the guessed reads past the count are dropped, not failures
    reads = _read(session, nvml, lanes)
    assert reads.samples == _both(0)
    assert (reads.failures, reads.timeouts) == ([], [])
    reads = _read(session, nvml, lanes)  # the guess is now the new count
    assert reads.samples == _both(0)
    # (GPUs 1 and 2 were guessed at the third read, and had no handle any more.)
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 1 + 3 + 1 + 1


def test_a_lost_gpu_is_one_failure_line_and_no_samples_the_others_whole() -> None:
    nvml = FakeNvml.with_gpus(3)
    session, _ = _session(nvml)
    lanes = LanePool("t")
    _read(session, nvml, lanes)
    nvml.gpus[1].lost = True  # every part fails
    reads = _read(session, nvml, lanes)
    assert reads.samples == _both(0) + _both(2)
    assert reads.failures == [f"GPU 1: {pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)}"]
    assert reads.timeouts == []
    nvml.gpus[1].lost = False
    nvml.gpus[2].unsupported = frozenset({"nvmlDeviceGetTemperature"})  # only a later part
    reads = _read(session, nvml, lanes)
    assert reads.samples == _both(0) + _both(1)  # GPU 2's main samples go too
    assert reads.failures == [f"GPU 2: {pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)}"]


def test_a_main_read_past_the_deadline_drops_its_gpu_a_later_part_only_itself() -> None:
    nvml = FakeNvml.with_gpus(3)
    session, _ = _session(nvml)
    lanes = LanePool("t", stuck_seconds=0)
    _read(session, nvml, lanes)
    nvml.gpus[0].delays["nvmlDeviceGetUtilizationRates"] = HANG
    nvml.gpus[1].delays["nvmlDeviceGetTemperature"] = HANG
    try:
        reads = _read(session, nvml, lanes, seconds=0.3)
        assert reads.samples == _both(1)[:1] + _both(2)
        assert reads.timeouts == ["GPU 0: t-gpu0: no answer by the scrape's deadline",
                                  "GPU 1: t-gpu1-temp: no answer by the scrape's deadline"]
        assert reads.failures == []
        # Still stuck at the next scrape: refused at once, the same GPUs left out.
        started = time.monotonic()
        again = _read(session, nvml, lanes, seconds=5.0)
        assert time.monotonic() - started < 2.0
        assert again.samples == _both(1)[:1] + _both(2)
        assert [t.split(":")[0] for t in again.timeouts] == ["GPU 0", "GPU 1"]
        assert all("still stuck" in t for t in again.timeouts)
        assert sorted(lanes.stuck()) == ["gpu0", "gpu1-temp"]
    finally:
        nvml.release.set()


def test_a_count_that_fails_or_misses_the_deadline_fails_the_scrape() -> None:
    nvml = FakeNvml.with_gpus(2)
    session, _ = _session(nvml)
    lanes = LanePool("t", stuck_seconds=0)
    _read(session, nvml, lanes)  # guess: 2

    def broken() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvml.nvmlDeviceGetCount = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(CollectorError) as failed:
        _read(session, nvml, lanes)
    assert type(failed.value) is CollectorError
    assert str(failed.value) == f"cannot count GPUs: {pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)}"

    def hung() -> int:
        nvml.release.wait(HANG)
        return 2

    nvml.nvmlDeviceGetCount = hung  # type: ignore[method-assign,assignment]
    nvml.gpus[0].delays["nvmlDeviceGetUtilizationRates"] = HANG
    try:
        with pytest.raises(CollectorTimeout, match="t-nvml: no answer"):
            _read(session, nvml, lanes, seconds=0.3)
        # The guessed reads were given up with the count: GPU 0's hung one is stuck now.
        assert sorted(lanes.stuck()) == ["gpu0", "nvml"]
        with pytest.raises(CollectorTimeout, match="t-nvml: still stuck"):
            _read(session, nvml, lanes)
    finally:
        nvml.release.set()


def test_without_nvml_a_read_fails_with_the_logged_error_not_a_timeout() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.library_present = False
    session, _ = _session(nvml)
    with pytest.raises(CollectorError) as failed:
        _read(session, nvml, LanePool("t"))
    assert type(failed.value) is CollectorError
    assert failed.value.logged is True
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 0


def test_the_default_retry_is_a_minute() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.library_present = False
    clock = Clock()
    session = NvmlSession(nvml, clock=clock)
    assert not session.available()
    clock.now += 59.5
    assert not session.available()
    assert nvml.calls["nvmlInit"] == 1
    clock.now += 0.5
    assert not session.available()
    assert nvml.calls["nvmlInit"] == 2


def test_the_first_read_guesses_no_gpu_so_a_gpu_less_node_reads_none() -> None:
    nvml = FakeNvml([])
    session, _ = _session(nvml)
    asked: list[int] = []

    def parts(index: int) -> Sequence[GpuPart]:
        asked.append(index)
        return _parts(nvml)(index)

    lanes = LanePool("t")
    reads = session.read_each_gpu(parts, lanes, time.monotonic() + 5)
    assert (reads.samples, reads.failures, reads.timeouts) == ([], [], [])
    assert asked == []
    assert lanes.stuck() == []


def test_an_identity_is_frozen_and_hashable() -> None:
    one = GpuIdentity(index=0, uuid="GPU-a", name="A100", pci_bus_id="00:17")
    assert hash(one) == hash(GpuIdentity(index=0, uuid="GPU-a", name="A100", pci_bus_id="00:17"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.uuid = "GPU-b"  # type: ignore[misc]


def test_every_guessed_read_past_a_smaller_count_is_given_up() -> None:
    nvml = FakeNvml.with_gpus(4)
    session, _ = _session(nvml)
    lanes = LanePool("t", stuck_seconds=0)
    _read(session, nvml, lanes, extra=False)  # guess: 4
    for gpu in nvml.gpus[2:]:
        gpu.delays["nvmlDeviceGetUtilizationRates"] = HANG

    def two_left() -> int:
        # NVML now counts two GPUs, once the guessed reads of GPUs 2 and 3 are under way.
        deadline = time.monotonic() + 10
        while nvml.calls["nvmlDeviceGetUtilizationRates"] < 4 + 4:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        return 2

    nvml.nvmlDeviceGetCount = two_left  # type: ignore[method-assign,assignment]
    try:
        reads = _read(session, nvml, lanes, extra=False)
        assert reads.samples == _both(0)[:1] + _both(1)[:1]
        assert (reads.failures, reads.timeouts) == ([], [])
        # Both were given up while they ran: their lanes refuse new reads until they return.
        assert sorted(lanes.stuck()) == ["gpu2", "gpu3"]
    finally:
        nvml.release.set()
