"""Which CUDA devices a training process uses, and their NVML UUIDs (for the join of
``trainwatch_trial_gpu_info{uuid}`` to the exporter's ``trainwatch_gpu_*{uuid}``).

Imported only when the training script has imported torch.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from typing import Any, NamedTuple

import torch

log = logging.getLogger(__name__)


class DeviceChoice(NamedTuple):
    """The CUDA devices a process trains on; ``observed`` is False for a best guess."""

    indices: tuple[int, ...]
    observed: bool


def training_devices(local_rank: int | None) -> DeviceChoice:
    """The devices this process trains on, once CUDA is in use (``((), False)`` before).

    In order: the devices where this process's caching allocator holds memory (what training
    actually used); else torchrun's ``LOCAL_RANK`` if it names a device; else the current
    device. ``current_device()`` alone is wrong under torchrun when a script does
    ``model.to(f"cuda:{local_rank}")`` without ``torch.cuda.set_device``: it is 0 on every rank.
    Call it on the training thread: the current device is per thread.
    """
    cuda = torch.cuda
    if not (cuda.is_available() and cuda.is_initialized()):
        return DeviceChoice((), False)
    count = int(cuda.device_count())
    # The allocator's counters live on the host: reading them creates no context on a device.
    used = tuple(i for i in range(count) if cuda.memory_allocated(i) > 0)
    if used:
        return DeviceChoice(used, True)
    if local_rank is not None and local_rank < count:
        return DeviceChoice((local_rank,), False)
    return DeviceChoice((int(cuda.current_device()),), False)


def uuid_from_properties(props: object) -> str | None:
    """NVML's form (``GPU-`` + dashed hex) of the UUID in torch's device properties.

    ``props.uuid`` is a ``torch._C._CUuuid`` (torch/csrc/cuda/Module.cpp): ``.bytes`` is a
    *list* of 16 ints, ``str()`` the dashed hex form without the ``GPU-`` NVML puts in front.
    ``None`` when the build reports no UUID, or an all-zero one.

    >>> class Uuid:
    ...     bytes = [0x3c, 0x3a, 0x0f, 0x6e] + [0x11] * 12
    >>> class Props:
    ...     uuid = Uuid()
    >>> uuid_from_properties(Props())
    'GPU-3c3a0f6e-1111-1111-1111-111111111111'
    """
    cuda_uuid: Any = getattr(props, "uuid", None)
    if cuda_uuid is None:
        return None
    try:
        raw = bytes(cuda_uuid.bytes)  # a list of ints from torch; bytes from other builds
        parsed = uuidlib.UUID(bytes=raw)
    except (AttributeError, TypeError, ValueError):
        try:
            parsed = uuidlib.UUID(str(cuda_uuid).removeprefix("GPU-"))
        except ValueError:
            return None
    return f"GPU-{parsed}" if parsed.int else None


def nvml_uuid(index: int) -> str | None:
    """The NVML UUID (``GPU-xxxxxxxx-...``) of torch device ``index``, as the exporter shows it."""
    props = torch.cuda.get_device_properties(index)
    return uuid_from_properties(props) or _uuid_by_pci_bus_id(props)


def _uuid_by_pci_bus_id(props: object) -> str | None:
    """For torch builds whose device properties carry no UUID: ask NVML by PCI bus id."""
    try:
        import pynvml

        p: Any = props
        bus_id = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        pynvml.nvmlInit()
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(bus_id))
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError, any pynvml.NVMLError
        log.warning("trainwatch: no NVML UUID for CUDA device %s: %s", props, exc)
        return None
