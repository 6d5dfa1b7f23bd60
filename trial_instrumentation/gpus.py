"""The GPUs a trial reports in ``trainwatch_trial_gpu_info{uuid}``.

Devices are noted on the training thread (the current CUDA device is per thread) and turned
into NVML UUIDs on the pusher thread, lazily, so a slow or failing lookup never costs a step.
Nothing here imports torch unless the training script already has.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)


class TrainingGpus:
    """Devices noted so far and their UUIDs; a device seen in use replaces a guessed one.

    >>> gpus = TrainingGpus(local_rank=None)
    >>> gpus.note()      # torch not imported, or CUDA not in use: nothing noted
    >>> gpus.uuids()
    []
    >>> TrainingGpus(local_rank=None, given=("GPU-1234abcd",)).uuids()
    ['GPU-1234abcd']
    """

    def __init__(self, local_rank: int | None, given: tuple[str, ...] = ()) -> None:
        self._local_rank = local_rank
        self._given = given  # TRAINWATCH_GPU_UUIDS: reported as they are, nothing detected
        self._observed: set[int] = set()  # devices where training allocated memory
        self._guess: int | None = None  # LOCAL_RANK or the current device, until one is seen
        self._uuids: dict[int, str] = {}  # CUDA index -> NVML UUID, "" when unknown

    def note(self) -> None:
        """Record the devices training uses now (call on the training thread)."""
        if self._given or "torch" not in sys.modules:
            return  # torch never imported by the script: no GPU in use, nothing to import
        try:
            from trial_instrumentation.torch_devices import training_devices
            choice = training_devices(self._local_rank)
        except Exception:  # a broken CUDA setup must not stop training
            log.exception("trainwatch: cannot tell which CUDA device this process uses")
            return
        if choice.observed:
            self._observed.update(choice.indices)
        elif choice.indices:
            self._guess = choice.indices[0]

    def indices(self) -> tuple[int, ...]:
        """The devices to report: those seen in use, else the guess, else none."""
        observed = tuple(sorted(self._observed))
        return observed or (() if self._guess is None else (self._guess,))

    def uuids(self) -> list[str]:
        """The NVML UUIDs of :meth:`indices` (called on the pusher thread), or the given ones."""
        if self._given:
            return list(self._given)
        indices = self.indices()
        for index in indices:
            if index not in self._uuids:
                self._uuids[index] = self._lookup(index)
        return sorted({self._uuids[index] for index in indices} - {""})

    @staticmethod
    def _lookup(index: int) -> str:
        try:
            from trial_instrumentation.torch_devices import nvml_uuid
            return nvml_uuid(index) or ""
        except Exception:  # a failing lookup must not fail every push after it
            log.exception("trainwatch: no UUID for CUDA device %d", index)
            return ""
