"""GPU identity without a GPU: torch's UUID mapping, the choice of device under torchrun, and
the PCI-bus-id fallback against a fake NVML (the one allowed stand-in, injected at the pynvml
boundary). torch.cuda is monkeypatched only to say which devices exist and hold memory."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

import trial_instrumentation as ti
from trial_instrumentation import names

torch = pytest.importorskip("torch")
from trial_instrumentation import torch_devices  # after importorskip: needs torch

UUID_BYTES = [0x3C, 0x3A, 0x0F, 0x6E, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33,
              0x44, 0x44, 0x55, 0x55, 0x66, 0x66]
NVML_UUID = "GPU-3c3a0f6e-1111-2222-3333-444455556666"


class CUuuid:
    """torch._C._CUuuid as torch/csrc/cuda/Module.cpp binds it: ``.bytes`` is a list of 16
    ints, ``str()`` the dashed hex form without NVML's ``GPU-``."""

    def __init__(self, data: list[int]) -> None:
        self.bytes = data

    def __str__(self) -> str:
        return NVML_UUID.removeprefix("GPU-") if self.bytes == UUID_BYTES else "?"


class DashedOnly:
    """A UUID object with only the string form."""

    def __str__(self) -> str:
        return NVML_UUID.removeprefix("GPU-")


@dataclass
class Props:
    pci_domain_id: int = 0
    pci_bus_id: int = 0x65
    pci_device_id: int = 0
    uuid: object = None


def fake_nvml(monkeypatch: pytest.MonkeyPatch, uuids: dict[str, bytes]) -> list[str]:
    asked: list[str] = []
    def handle_by_pci_bus_id(bus: str) -> bytes:
        asked.append(bus)
        return uuids[bus]  # KeyError for an unknown bus, as NVMLError would be

    nvml = types.ModuleType("pynvml")
    nvml.__dict__.update(nvmlInit=lambda: None, nvmlDeviceGetUUID=lambda handle: handle,
                         nvmlDeviceGetHandleByPciBusId=handle_by_pci_bus_id)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return asked


@dataclass
class FakeCuda:
    """What torch.cuda says on a machine with ``count`` GPUs, CUDA in use."""

    count: int = 2
    current: int = 0
    allocated: dict[int, int] = field(default_factory=dict)
    props: dict[int, Props] = field(default_factory=dict)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, fn in (("is_available", lambda: True), ("is_initialized", lambda: True),
                         ("device_count", lambda: self.count),
                         ("current_device", lambda: self.current),
                         ("memory_allocated", lambda i: self.allocated.get(i, 0)),
                         ("get_device_properties", lambda i: self.props[i])):
            monkeypatch.setattr(torch.cuda, name, fn)


def test_torch_uuid_bytes_list_maps_to_the_nvml_form(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_nvml(monkeypatch, {})
    FakeCuda(props={0: Props(uuid=CUuuid(UUID_BYTES))}).install(monkeypatch)
    assert torch_devices.nvml_uuid(0) == NVML_UUID
    assert asked == []  # no NVML lookup needed when torch knows the UUID


@pytest.mark.parametrize("uuid", [DashedOnly(), NVML_UUID.removeprefix("GPU-"), NVML_UUID,
                                  CUuuid(UUID_BYTES), types.SimpleNamespace(bytes=bytes(
                                      UUID_BYTES))], ids=["str()", "str", "GPU-str",
                                                          "CUuuid", "bytes"])
def test_every_uuid_form_maps_to_the_nvml_form(uuid: object) -> None:
    assert torch_devices.uuid_from_properties(Props(uuid=uuid)) == NVML_UUID


@pytest.mark.parametrize("uuid", [None, CUuuid([0] * 16), "not-a-uuid"])
def test_no_usable_uuid_falls_back_to_nvml_by_bus_id(monkeypatch: pytest.MonkeyPatch,
                                                     uuid: object) -> None:
    asked = fake_nvml(monkeypatch, {"00000000:65:00.0": NVML_UUID.encode()})
    FakeCuda(props={0: Props(uuid=uuid)}).install(monkeypatch)
    assert torch_devices.nvml_uuid(0) == NVML_UUID
    assert asked == ["00000000:65:00.0"]


def test_unknown_device_gives_no_uuid_and_no_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, {})
    assert torch_devices._uuid_by_pci_bus_id(Props(pci_bus_id=0x3B)) is None


@pytest.mark.parametrize(("cuda", "local_rank", "chosen"), [
    (FakeCuda(allocated={1: 512}), 0, ((1,), True)),  # what training used wins
    (FakeCuda(allocated={0: 1, 1: 1}), None, ((0, 1), True)),  # model parallel: both
    (FakeCuda(), 1, ((1,), False)),  # torchrun, nothing allocated yet: LOCAL_RANK
    (FakeCuda(current=1), 2, ((1,), False)),  # LOCAL_RANK beyond the devices: current
    (FakeCuda(current=1), None, ((1,), False)),
])
def test_training_device_choice(monkeypatch: pytest.MonkeyPatch, cuda: FakeCuda,
                                local_rank: int | None,
                                chosen: tuple[tuple[int, ...], bool]) -> None:
    cuda.install(monkeypatch)
    assert torch_devices.training_devices(local_rank) == chosen


def test_nothing_chosen_before_cuda_is_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCuda().install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert torch_devices.training_devices(1) == ((), False)


def test_each_torchrun_rank_reports_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 of a torchrun job that did model.to("cuda:1") without set_device: current
    device 0, LOCAL_RANK 1. Before training allocates, LOCAL_RANK is the guess; once it has,
    the device it used is what the trial reports."""
    other = "GPU-00000000-0000-0000-0000-00000000000a"
    cuda = FakeCuda(props={0: Props(uuid=other), 1: Props(uuid=CUuuid(UUID_BYTES))})
    cuda.install(monkeypatch)
    monkeypatch.setenv(names.ENV_LOCAL_RANK, "1")
    with ti.Trial(experiment="e", trial="t", pull_port=0, rank=1, world_size=2) as trial:
        assert gpu_info(trial) == [NVML_UUID]
        cuda.allocated = {0: 1024}  # this rank really trains on cuda:0 after all
        for _ in trial.loader(range(1), samples=1):  # the loader notes the device
            pass
        assert gpu_info(trial) == [other]


def test_on_a_second_node_the_guess_is_the_local_rank_not_the_global_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 3 of 4, two per node: local rank 1 on its node of two GPUs. Its guess, before
    training allocates, is cuda:1; the global rank names no device here (the current device,
    cuda:0, would be another rank's)."""
    other = "GPU-00000000-0000-0000-0000-00000000000a"
    FakeCuda(props={0: Props(uuid=other), 1: Props(uuid=CUuuid(UUID_BYTES))}).install(monkeypatch)
    with ti.Trial(experiment="e", trial="t", pull_port=0, rank=3, world_size=4,
                  local_rank=1) as trial:
        assert gpu_info(trial) == [NVML_UUID]


def gpu_info(trial: ti.Trial) -> list[str]:
    return [s.labels["uuid"] for m in trial.registry.collect() for s in m.samples
            if s.name == names.GPU_INFO]


class BadBytes:
    """A UUID object whose ``.bytes`` cannot be a UUID's 16 bytes, but whose ``str()`` is."""

    def __init__(self, data: object) -> None:
        self.bytes = data

    def __str__(self) -> str:
        return NVML_UUID


@pytest.mark.parametrize("data", [None, 7, [0x3C] * 4, [256] * 16, b"\x01" * 15],
                         ids=["none", "int", "short", "over-255", "15-bytes"])
def test_unusable_uuid_bytes_fall_back_to_the_string_form(data: object) -> None:
    assert torch_devices.uuid_from_properties(Props(uuid=BadBytes(data))) == NVML_UUID


def test_properties_without_a_uuid_attribute_give_none() -> None:
    assert torch_devices.uuid_from_properties(types.SimpleNamespace(name="old build")) is None
    assert torch_devices.uuid_from_properties(Props(uuid=CUuuid([0] * 16))) is None
    assert torch_devices.uuid_from_properties(Props(uuid="0" * 32)) is None


def test_the_bus_id_lookup_writes_each_field_in_nvmls_width(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_nvml(monkeypatch, {"0000000a:3b:1f.0": NVML_UUID.encode(),
                                    "00000001:04:02.0": "GPU-as-text"})
    props = Props(pci_domain_id=0xA, pci_bus_id=0x3B, pci_device_id=0x1F)
    assert torch_devices._uuid_by_pci_bus_id(props) == NVML_UUID
    assert torch_devices._uuid_by_pci_bus_id(
        Props(pci_domain_id=1, pci_bus_id=4, pci_device_id=2)) == "GPU-as-text"  # str from NVML
    assert asked == ["0000000a:3b:1f.0", "00000001:04:02.0"]


def test_a_failed_bus_id_lookup_is_logged(monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    fake_nvml(monkeypatch, {})
    with caplog.at_level("WARNING", logger="trial_instrumentation.torch_devices"):
        assert torch_devices._uuid_by_pci_bus_id(Props(pci_bus_id=0x3B)) is None
    assert [r.getMessage().startswith("trainwatch: no NVML UUID for CUDA device")
            for r in caplog.records] == [True]


def test_nothing_chosen_when_cuda_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCuda(allocated={0: 5}).install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_devices.training_devices(0) == ((), False)


@pytest.mark.parametrize(("cuda", "local_rank", "chosen"), [
    (FakeCuda(count=3, allocated={2: 1}), 0, ((2,), True)),  # the last device is looked at
    (FakeCuda(count=2, allocated={2: 9}, current=1), 0, ((0,), False)),  # beyond count: not seen
    (FakeCuda(count=3, current=2), 0, ((0,), False)),  # LOCAL_RANK 0 is a device, not "none"
    (FakeCuda(count=3, current=0), 2, ((2,), False)),
    (FakeCuda(count=2, current=1), 5, ((1,), False)),  # LOCAL_RANK far beyond: current
])
def test_training_device_choice_at_the_edges(monkeypatch: pytest.MonkeyPatch, cuda: FakeCuda,
                                             local_rank: int | None,
                                             chosen: tuple[tuple[int, ...], bool]) -> None:
    cuda.install(monkeypatch)
    assert torch_devices.training_devices(local_rank) == chosen
