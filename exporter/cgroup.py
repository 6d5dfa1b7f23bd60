"""Whom a GPU process works for, from its ``/proc/<pid>/cgroup``: a Kubernetes pod (its UID and
the container's id) or a Slurm job, with no kubelet socket and no root (docs/design.md,
``trainwatch_gpu_process_info``).

Each line of the file is ``hierarchy:controllers:path`` (cgroup v1: one per hierarchy; v2: the
one line ``0::path``). The path's parts name the owner:

- a pod: ``pod<uid>`` (cgroupfs driver, ``/kubepods/burstable/pod<uid>/<id>``) or
  ``kubepods-<qos>-pod<uid_with_underscores>.slice`` (systemd driver); a static pod's
  ``pod<32 hex>`` only under a ``kubepods`` part;
- its container: ``cri-containerd-<id>.scope`` (containerd), ``crio-<id>.scope`` (CRI-O),
  ``docker-<id>.scope`` or a bare 64-hex ``<id>`` part (cgroupfs driver); CRI-O's
  ``crio-conmon-<id>.scope`` is its monitor, not the container, and names none;
- a Slurm job: ``job_<id>`` under a ``slurm`` part (v1 ``/slurm/uid_<u>/job_<id>/step_<s>``,
  v2 ``/system.slice/slurmstepd.scope/job_<id>/step_<s>``).

Anything else (a plain process, a malformed line, text that is not a cgroup file at all) names
nobody: ``parse`` never raises. Values are bounded by their patterns (a UUID, 64 hex digits, at
most 20 decimal digits), so no file can make a label grow.

>>> parse("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_aaaa_bbbb"
...       "_cccc_0123456789ab.slice/cri-containerd-" + "ab" * 32 + ".scope\\n").pod_uid
'1b2c3d4e-aaaa-bbbb-cccc-0123456789ab'
>>> parse("12:memory:/slurm/uid_1000/job_81234/step_0/task_0\\n").slurm_job_id
'81234'
>>> parse("0::/user.slice/user-1000.slice/session-3.scope\\n")
Attribution(pod_uid='', container_id='', slurm_job_id='')
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_HEX = "[0-9a-fA-F]"
# A pod UID (a UUID, with `_` for `-` under the systemd driver), anywhere in the path (a cgroup
# namespace may show it relative, without its kubepods parent), or a static pod's 32-hex hash
# under a kubepods part.
_POD = re.compile(rf"(?:^|-)pod({_HEX}{{8}}(?:[-_]{_HEX}{{4}}){{3}}[-_]{_HEX}{{12}})"
                  r"(?:\.slice)?$")
_STATIC_POD = re.compile(rf"(?:^|-)pod({_HEX}{{32}})(?:\.slice)?$")
_CONTAINER = re.compile(rf"^(?:(?:cri-containerd|crio|docker)-)?({_HEX}{{64}})(?:\.scope)?$")
_SLURM_JOB = re.compile(r"^job_(\d{1,20})$")
# Bytes read of one cgroup file: v1 has about a dozen lines, each under a few hundred bytes.
MAX_FILE_BYTES = 64 * 1024
# Processes whose attribution is kept; past it the cache starts again (NVML lists few).
MAX_CACHED = 4096


@dataclass(frozen=True)
class Attribution:
    """The owner of a process; empty strings where the cgroup names none."""

    pod_uid: str = ""
    container_id: str = ""
    slurm_job_id: str = ""

    @property
    def labels(self) -> tuple[str, str, str]:
        return self.pod_uid, self.container_id, self.slurm_job_id


NOBODY = Attribution()


def _of_path(path: str) -> Attribution:
    parts = path.split("/")
    pod = container = job = ""
    in_pods = in_slurm = False
    for part in parts:
        in_pods = in_pods or part.startswith("kubepods")
        in_slurm = in_slurm or part.startswith("slurm")
        if (match := _POD.search(part)) or (in_pods and (match := _STATIC_POD.search(part))):
            pod = match.group(1).replace("_", "-").lower()
        elif match := _CONTAINER.match(part):
            container = match.group(1).lower()
        elif in_slurm and (match := _SLURM_JOB.match(part)):
            job = match.group(1)
    return Attribution(pod, container, job)


def parse(text: str) -> Attribution:
    """The owner named by the text of a ``/proc/<pid>/cgroup`` file: per field, the first line
    that names one (cgroup v2's line and v1's hierarchies name the same owner)."""
    found = [_of_path(line.split(":", 2)[2]) for line in text.splitlines() if line.count(":") >= 2]
    return Attribution(*(next((a.labels[i] for a in found if a.labels[i]), "")
                         for i in range(3)))


def _read(proc_root: Path, pid: int | str) -> bytes | None:
    try:
        with (proc_root / str(pid) / "cgroup").open("rb") as file:
            return file.read(MAX_FILE_BYTES)
    except OSError:
        return None


class AttributionCache:
    """Each process's owner, read once while it lives: ``of`` reads a pid's cgroup file the first
    time it is asked for, ``keep`` forgets the pids no longer running. A cgroup file that cannot
    be read (the process is gone, or the procfs is another PID namespace's) names nobody for
    that scrape and is read again at the next one. A process in the exporter's own cgroup names
    nobody either: the exporter runs no GPU work, so that pid is a host PID the procfs shows as
    one of the exporter's own (a pod without hostPID), not the GPU process."""

    def __init__(self, proc_root: str | Path = "/proc", max_cached: int = MAX_CACHED) -> None:
        self.proc_root = Path(proc_root)
        self._max = max_cached
        self._known: dict[int, Attribution] = {}
        self._lock = threading.Lock()  # scrapes may run concurrently
        self._own = _read(self.proc_root, "self")

    def of(self, pid: int) -> Attribution:
        with self._lock:
            known = self._known.get(pid)
        if known is not None:
            return known
        data = _read(self.proc_root, pid)
        if data is None:
            return NOBODY
        found = NOBODY if data == self._own else parse(data.decode("utf-8", errors="replace"))
        with self._lock:
            if len(self._known) >= self._max:
                self._known.clear()
            self._known[pid] = found
        return found

    def keep(self, pids: Iterable[int]) -> None:
        """Forget every pid but these (the processes NVML lists now)."""
        live = set(pids)
        with self._lock:
            for pid in [p for p in self._known if p not in live]:
                del self._known[pid]

    def __len__(self) -> int:
        return len(self._known)
