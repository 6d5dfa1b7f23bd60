"""GPU identity without a GPU: the PCI-bus-id fallback against a fake NVML (the one allowed
stand-in, injected at the pynvml boundary)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

pytest.importorskip("torch")
from trial_instrumentation import torch_timing


@dataclass
class Props:
    pci_domain_id: int = 0
    pci_bus_id: int = 0x65
    pci_device_id: int = 0


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


def test_uuid_by_pci_bus_id_uses_nvml_bus_id_format(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_nvml(monkeypatch, {"00000000:65:00.0": b"GPU-3c3a0f6e-1111-2222-3333-444455556666"})
    assert torch_timing._uuid_by_pci_bus_id(Props()) == "GPU-3c3a0f6e-1111-2222-3333-444455556666"
    assert asked == ["00000000:65:00.0"]


def test_unknown_device_gives_no_uuid_and_no_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, {})
    assert torch_timing._uuid_by_pci_bus_id(Props(pci_bus_id=0x3B)) is None
