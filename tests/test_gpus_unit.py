"""TrainingGpus without a GPU: torch_devices replaced by a stand-in, so each rule is seen alone:
given UUIDs win, devices seen in use replace a guess and add up, lookups are made once per
device (a failure too), and unknown UUIDs are left out."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator

import pytest

from trial_instrumentation.gpus import TrainingGpus


class Devices:
    """Stands in for trial_instrumentation.torch_devices: the choices training_devices gives,
    in turn, and the UUID of each index."""

    def __init__(self, *choices: tuple[tuple[int, ...], bool], uuids: dict[int, object]) -> None:
        self.choices = list(choices)
        self.uuids = uuids
        self.asked: list[int | None] = []
        self.looked_up: list[int] = []

    def module(self) -> types.ModuleType:
        module = types.ModuleType("trial_instrumentation.torch_devices")
        module.training_devices = self.training_devices  # type: ignore[attr-defined]
        module.nvml_uuid = self.nvml_uuid  # type: ignore[attr-defined]
        return module

    def training_devices(self, local_rank: int | None) -> types.SimpleNamespace:
        self.asked.append(local_rank)
        indices, observed = self.choices.pop(0)
        return types.SimpleNamespace(indices=indices, observed=observed)

    def nvml_uuid(self, index: int) -> object:
        self.looked_up.append(index)
        found = self.uuids[index]
        if isinstance(found, Exception):
            raise found
        return found


class NVMLError(Exception):
    """pynvml's errors derive from Exception alone: no RuntimeError, no OSError."""


@pytest.fixture
def with_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    yield


def use(monkeypatch: pytest.MonkeyPatch, devices: Devices) -> Devices:
    monkeypatch.setitem(sys.modules, "trial_instrumentation.torch_devices", devices.module())
    return devices


@pytest.mark.usefixtures("with_torch")
def test_given_uuids_are_reported_as_they_are_and_nothing_is_detected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    devices = use(monkeypatch, Devices(((0,), True), uuids={0: "GPU-0"}))
    gpus = TrainingGpus(local_rank=2, given=("GPU-b", "GPU-a"))
    gpus.note()
    assert gpus.uuids() == ["GPU-b", "GPU-a"]
    assert devices.asked == [] and devices.looked_up == []


def test_without_torch_imported_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    devices = use(monkeypatch, Devices(((0,), True), uuids={0: "GPU-0"}))
    gpus = TrainingGpus(local_rank=0)
    gpus.note()
    assert (gpus.indices(), gpus.uuids(), devices.asked) == ((), [], [])


@pytest.mark.usefixtures("with_torch")
def test_a_guess_holds_until_a_device_is_seen_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = use(monkeypatch, Devices(((), False), ((3,), False), ((), False), ((5, 1), True),
                                       ((4,), False), ((2, 5), True), uuids={}))
    gpus = TrainingGpus(local_rank=3)
    gpus.note()
    assert gpus.indices() == ()  # CUDA not in use yet: no guess
    gpus.note()
    assert gpus.indices() == (3,)
    gpus.note()
    assert gpus.indices() == (3,)  # a choice of nothing keeps the guess
    gpus.note()
    assert gpus.indices() == (1, 5)  # seen in use: the guess is gone
    gpus.note()
    assert gpus.indices() == (1, 5)  # a later guess does not replace what was seen
    gpus.note()
    assert gpus.indices() == (1, 2, 5)  # devices seen add up
    assert devices.asked == [3] * 6


@pytest.mark.usefixtures("with_torch")
def test_a_guess_of_device_zero_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, Devices(((0, 2), False), uuids={0: "GPU-zero"}))
    gpus = TrainingGpus(local_rank=None)
    gpus.note()
    assert (gpus.indices(), gpus.uuids()) == ((0,), ["GPU-zero"])


@pytest.mark.usefixtures("with_torch")
def test_a_failing_detection_is_logged_and_notes_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    devices = use(monkeypatch, Devices(uuids={}))  # no choice: training_devices raises
    gpus = TrainingGpus(local_rank=1)
    gpus.note()
    assert gpus.indices() == () and devices.asked == [1]
    assert [r.getMessage() for r in caplog.records] == [
        "trainwatch: cannot tell which CUDA device this process uses"]


@pytest.mark.usefixtures("with_torch")
def test_each_device_is_looked_up_once_and_unknown_ones_are_left_out(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    devices = use(monkeypatch, Devices(((3, 1), True), ((0, 2), True),
                                       uuids={0: None, 1: "GPU-b", 2: NVMLError("nvml"),
                                              3: "GPU-a"}))
    gpus = TrainingGpus(local_rank=None)
    gpus.note()
    assert gpus.uuids() == ["GPU-a", "GPU-b"]
    assert gpus.uuids() == ["GPU-a", "GPU-b"]
    assert devices.looked_up == [1, 3]
    gpus.note()
    with caplog.at_level(logging.ERROR):
        assert gpus.uuids() == ["GPU-a", "GPU-b"]  # no UUID for 0, 2's lookup failed
        assert gpus.uuids() == ["GPU-a", "GPU-b"]
    assert devices.looked_up == [1, 3, 0, 2]  # a failure is not retried at every push
    assert [r.getMessage() for r in caplog.records] == ["trainwatch: no UUID for CUDA device 2"]


@pytest.mark.usefixtures("with_torch")
def test_two_devices_with_one_uuid_report_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, Devices(((0, 1), True), uuids={0: "GPU-same", 1: "GPU-same"}))
    gpus = TrainingGpus(local_rank=None)
    gpus.note()
    assert gpus.uuids() == ["GPU-same"]
