"""Whom a GPU process works for (exporter/cgroup.py, trainwatch_gpu_process_info): fake /proc
trees with cgroup v1 and v2 files of Kubernetes pods (containerd and CRI-O, cgroupfs and systemd
drivers), Slurm jobs and plain processes, each attributed right and nothing made up; malformed
and unreadable files cost the scrape nothing; each pid is read once while it lives; and the
series a node with 8 GPUs and 100 processes serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from benchmarks.fake_nvml import FakeNvml, fake_uuid
from exporter import cgroup
from exporter.cgroup import Attribution, AttributionCache, parse
from exporter.collector import ScrapeCollector
from exporter.gpu import GpuCollector
from exporter.gpu_process import GpuProcessCollector
from exporter.nvml import NvmlSession

UID = "1b2c3d4e-5f60-4a1b-9c2d-0123456789ab"
UID_ = UID.replace("-", "_")
CID = "4f6c" * 16  # 64 hex digits
INFO = "trainwatch_gpu_process_info"
PROCESS_FAMILIES = ("trainwatch_gpu_process_memory_bytes",
                    "trainwatch_gpu_process_utilization_ratio", INFO)

POD = Attribution(pod_uid=UID, container_id=CID)
CASES = {
    "containerd, systemd driver, cgroup v2": (
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"), POD),
    "containerd, cgroupfs driver, cgroup v1": (
        (f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n"
        f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n0::/\n"), POD),
    "containerd, systemd driver, cgroup v1 (guaranteed QoS)": (
        (f"9:pids:/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
        f"4:memory:/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"), POD),
    "cgroup v1, a hierarchy that stops at the pod's cgroup before one that names both": (
        (f"11:hugetlb:/kubepods/burstable/pod{UID}\n"
         f"4:memory:/kubepods/burstable/pod{UID}/{CID}\n"), POD),
    "CRI-O, systemd driver, cgroup v2": (
        (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
        f"crio-{CID}.scope\n"), POD),
    "CRI-O, systemd driver, cgroup v1": (
        (f"7:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"crio-{CID}.scope\n"), POD),
    "CRI-O's monitor: the pod, no container": (
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"crio-conmon-{CID}.scope\n"), Attribution(pod_uid=UID)),
    "seen from a private cgroup namespace (relative path)": (
        f"0::/../../kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n", POD),
    "a static pod's config hash": (
        (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{'a1' * 16}.slice/"
        f"cri-containerd-{CID}.scope\n"), Attribution(pod_uid="a1" * 16, container_id=CID)),
    "a static pod's config hash, cgroupfs driver (a QoS part between)": (
        f"12:memory:/kubepods/besteffort/pod{'b2' * 16}/{CID}\n",
        Attribution(pod_uid="b2" * 16, container_id=CID)),
    "Slurm, cgroup v1": (
        ("12:memory:/slurm/uid_1000/job_81234/step_0/task_1\n"
        "5:devices:/slurm/uid_1000/job_81234/step_0\n"
        "1:name=systemd:/system.slice/slurmd.service\n"), Attribution(slurm_job_id="81234")),
    "Slurm, cgroup v2": (
        "0::/system.slice/slurmstepd.scope/job_81235/step_batch/user/task_0\n",
        Attribution(slurm_job_id="81235")),
    "Slurm, cgroup v1, a node with several slurmd": (
        "4:memory:/slurm_node07/uid_1000/job_9/step_extern\n", Attribution(slurm_job_id="9")),
    "Docker outside Kubernetes: the container only": (
        f"0::/system.slice/docker-{CID}.scope\n", Attribution(container_id=CID)),
    "a plain process, cgroup v2": ("0::/user.slice/user-1000.slice/session-3.scope\n",
                                   Attribution()),
    "a plain process, cgroup v1": (
        ("12:memory:/user.slice/user-1000.slice\n1:name=systemd:/user.slice/user-1000.slice/"
        "session-3.scope\n"), Attribution()),
    "a systemd service named like a job, outside Slurm": (
        "0::/system.slice/job_5.service/job_7\n", Attribution()),
    "a static-pod-like hash outside kubepods": (
        f"0::/machine.slice/libpod-pod{'a1' * 16}.slice\n", Attribution()),
    "podman's pod slice (not a Kubernetes UID)": (
        f"0::/machine.slice/machine-libpod_pod_{CID}.slice/libpod-{'5' * 64}.scope\n",
        Attribution()),
}
MALFORMED = {
    "empty": "",
    "no colons": "kubepods/pod" + UID + "\n",
    "one colon": f"0:/kubepods/pod{UID}/{CID}\n",
    "a truncated UID": "0::/kubepods/pod1b2c3d4e-5f60\n",
    "a short container id": "0::/kubepods/podx/cri-containerd-abc.scope\n",
    "a job id of 30 digits": "0::/slurm/uid_1/job_" + "9" * 30 + "/step_0\n",
    "NUL bytes and noise": "\x00\x00::\x00/\x00kubepods\n\n:::\n",
}


def proc_tree(root: Path, files: dict[int, str | bytes | None]) -> Path:
    """``root/<pid>/cgroup`` for each pid; None: the pid's cgroup is a directory (unreadable)."""
    for pid, text in files.items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        path = root / str(pid) / "cgroup"
        if text is None:
            path.mkdir()
        else:
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


@pytest.mark.parametrize("case", list(CASES))
def test_each_cgroup_form_is_attributed_right(case: str, tmp_path: Path) -> None:
    text, expected = CASES[case]
    assert parse(text) == expected
    assert AttributionCache(proc_tree(tmp_path, {77: text})).of(77) == expected


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_names_nobody(case: str) -> None:
    assert parse(MALFORMED[case]) == Attribution()


def test_an_unreadable_or_missing_file_names_nobody_and_is_read_again(tmp_path: Path) -> None:
    root = proc_tree(tmp_path, {5: None})  # a directory where the file should be
    cache = AttributionCache(root)
    assert cache.of(5) == Attribution() and cache.of(6) == Attribution()  # 6: no such pid
    assert len(cache) == 0  # not remembered: the next scrape reads again
    proc_tree(tmp_path, {6: CASES["Slurm, cgroup v2"][0]})
    assert cache.of(6) == Attribution(slurm_job_id="81235")


def test_bytes_that_are_not_utf8_are_read_as_text(tmp_path: Path) -> None:
    text = f"0::/kubepods/burstable/pod{UID}/{CID}\n".encode() + b"\xff\xfe:\x80\n"
    assert AttributionCache(proc_tree(tmp_path, {9: text})).of(9) == POD


def test_only_the_start_of_a_huge_file_is_read(tmp_path: Path) -> None:
    filler = ("1:x:/" + "a" * 200 + "\n") * (cgroup.MAX_FILE_BYTES // 100)
    late = f"0::/kubepods/burstable/pod{UID}/{CID}\n"
    assert AttributionCache(proc_tree(tmp_path, {9: filler + late})).of(9) == Attribution()


@given(st.text())
def test_the_parser_never_raises_on_any_text(text: str) -> None:
    found = parse(text)
    assert len(found.pod_uid) <= 36 and len(found.container_id) <= 64
    assert len(found.slurm_job_id) <= 20


PIECES = st.sampled_from(["0", "12", ":", "::", "/", "\n", "kubepods", ".slice", "-pod",
                          "pod", UID, UID_, "cri-containerd-", "crio-", CID, ".scope", "slurm",
                          "job_", "42", "step_0", "uid_1000", "..", "_", "-", "\x00", "é"])


@given(st.lists(PIECES, max_size=40).map("".join))
def test_the_parser_never_raises_on_text_made_of_cgroup_pieces(text: str) -> None:
    found = parse(text)
    assert found.pod_uid in ("", UID, UID.lower()) or len(found.pod_uid) == 32
    assert found.container_id in ("", CID)
    assert found.slurm_job_id == "" or found.slurm_job_id.isdigit()


def registry_for(nvml: FakeNvml, owners: AttributionCache) -> CollectorRegistry:
    session = NvmlSession(nvml, retry_seconds=60)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu_process": GpuProcessCollector(session,
                                                                           owners=owners)},
                                      version="test"))
    return registry


def info_series(registry: CollectorRegistry) -> dict[tuple[str, str], dict[str, str]]:
    """(uuid, pid) -> the info series' attribution labels."""
    return {(s.labels["uuid"], s.labels["pid"]): {k: s.labels[k] for k in
                                                  ("pod_uid", "container_id", "slurm_job_id")}
            for family in registry.collect() if family.name == INFO for s in family.samples
            if s.value == 1}


def test_the_collector_attributes_each_gpu_process(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[0].processes = ((101, 2**30), (102, 2**30), (103, 2**30))
    nvml.gpus[0].process_util = ((104, 30, 2**62),)  # ran a kernel, holds no memory listed
    nvml.gpus[1].processes = ((101, 2**30), (105, 2**30))  # 101 uses both GPUs
    nvml.gpus[1].process_util = ()
    root = proc_tree(tmp_path, {
        101: CASES["containerd, systemd driver, cgroup v2"][0],
        102: CASES["Slurm, cgroup v1"][0],
        103: CASES["a plain process, cgroup v2"][0],
        104: CASES["CRI-O, systemd driver, cgroup v2"][0],
        105: "garbage without structure\x00",
    })
    registry = registry_for(nvml, AttributionCache(root))
    pod = {"pod_uid": UID, "container_id": CID, "slurm_job_id": ""}
    nobody = {"pod_uid": "", "container_id": "", "slurm_job_id": ""}
    assert info_series(registry) == {
        (fake_uuid(0), "101"): pod, (fake_uuid(1), "101"): pod,
        (fake_uuid(0), "102"): {**nobody, "slurm_job_id": "81234"},
        (fake_uuid(0), "103"): nobody, (fake_uuid(0), "104"): pod, (fake_uuid(1), "105"): nobody}
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "gpu_process"}) == 1


def test_an_unreadable_cgroup_costs_the_scrape_nothing(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(2)  # pids 4242 and 4243
    root = proc_tree(tmp_path, {4242: None})  # 4243: no such pid under this procfs
    registry = registry_for(nvml, AttributionCache(root))
    nobody = {"pod_uid": "", "container_id": "", "slurm_job_id": ""}
    assert info_series(registry) == {(fake_uuid(0), "4242"): nobody,
                                     (fake_uuid(1), "4243"): nobody}
    assert registry.get_sample_value("trainwatch_gpu_process_memory_bytes",
                                     {"gpu": "1", "uuid": fake_uuid(1), "pid": "4243"}) == 2**31
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "gpu_process"}) == 1


def test_each_pid_is_read_once_while_it_runs_and_forgotten_when_it_ends(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].processes, nvml.gpus[0].process_util = ((7, 2**30),), ()
    root = proc_tree(tmp_path, {7: CASES["Slurm, cgroup v2"][0]})
    cache = AttributionCache(root)
    registry = registry_for(nvml, cache)
    assert info_series(registry)[(fake_uuid(0), "7")]["slurm_job_id"] == "81235"
    (root / "7" / "cgroup").write_text("0::/slurm/job_1/step_0\n")  # not read again ...
    assert info_series(registry)[(fake_uuid(0), "7")]["slurm_job_id"] == "81235"
    nvml.gpus[0].processes = ()
    assert info_series(registry) == {} and len(cache) == 0  # ... until the process is gone
    nvml.gpus[0].processes = ((7, 2**30),)  # the pid reused: read anew
    assert info_series(registry)[(fake_uuid(0), "7")]["slurm_job_id"] == "1"


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    root = proc_tree(tmp_path, {pid: CASES["Slurm, cgroup v2"][0] for pid in range(1, 11)})
    cache = AttributionCache(root, max_cached=4)
    for pid in range(1, 11):
        assert cache.of(pid).slurm_job_id == "81235"
        assert len(cache) <= 4


def fleet_node(tmp_path: Path, gpus: int = 8, processes: int = 100) -> tuple[FakeNvml, Path]:
    """``processes`` processes spread over ``gpus`` GPUs, each holding memory and running
    kernels, in pods (a third), Slurm jobs (a third) and plain processes."""
    nvml = FakeNvml.with_gpus(gpus)
    forms = [CASES["containerd, systemd driver, cgroup v2"][0], CASES["Slurm, cgroup v2"][0],
             CASES["a plain process, cgroup v2"][0]]
    pids = list(range(10_000, 10_000 + processes))
    for index, gpu in enumerate(nvml.gpus):
        mine = pids[index::gpus]
        gpu.processes = tuple((pid, 2**30) for pid in mine)
        gpu.process_util = tuple((pid, 50, 2**62) for pid in mine)
    return nvml, proc_tree(tmp_path, {pid: forms[pid % 3] for pid in pids})


def test_series_per_node_with_8_gpus_and_100_processes(tmp_path: Path) -> None:
    """The figures docs/design.md gives ("Attributing GPU processes"): three series per process
    on a GPU, of which the info series is one; the GPU collector's are unchanged by it."""
    nvml, root = fleet_node(tmp_path)
    session = NvmlSession(nvml, retry_seconds=60)
    gpus = GpuCollector(session, pcie_throughput=True)
    gpus.prime()  # as the exporter does at start: GPM's series from the first scrape on
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({
        "gpu": gpus, "gpu_process": GpuProcessCollector(session, owners=AttributionCache(root))},
        version="test"))
    nvml.advance(15.0)
    by_family: dict[str, int] = {}
    for family in registry.collect():
        by_family[family.name] = by_family.get(family.name, 0) + len(family.samples)
    assert {name: by_family[name] for name in PROCESS_FAMILIES} == dict.fromkeys(
        PROCESS_FAMILIES, 100)
    # The whole scrape of the gpu and gpu_process collectors: 45 series per GPU (and
    # nvml_absent), 3 per process, 9 of the scrape's own.
    assert sum(by_family.values()) == 8 * 45 + 1 + 3 * 100 + 9 == 670
    assert len(info_series(registry)) == 100


def test_a_pid_in_the_exporters_own_cgroup_names_nobody(tmp_path: Path) -> None:
    """A pod without hostPID: the host PID NVML gives is, in the pod's /proc, one of the
    exporter's own processes, whose pod is not the GPU process's."""
    own = CASES["containerd, systemd driver, cgroup v2"][0]
    root = proc_tree(tmp_path, {1: own, 8: CASES["Slurm, cgroup v2"][0]})
    (root / "self").symlink_to(root / "1")
    cache = AttributionCache(root)
    assert cache.of(1) == Attribution()
    assert cache.of(8) == Attribution(slurm_job_id="81235")


# Mutation testing (make mutation TARGETS=cgroup) found these edges unasserted.
SLURM_LINE = "0::/slurm/uid_0/job_81235/step_0\n"  # cut in its first 10 characters: no job


@pytest.mark.parametrize(("filler", "job"), [
    (cgroup.MAX_FILE_BYTES - len(SLURM_LINE), "81235"),  # ends exactly at the limit: read
    (cgroup.MAX_FILE_BYTES - 10, ""),  # only "0::/slurm/" of it is read: nobody
])
def test_a_cgroup_file_is_read_up_to_64_kib_exactly(tmp_path: Path, filler: int,
                                                    job: str) -> None:
    assert cgroup.MAX_FILE_BYTES == 64 * 1024
    text = "x" * (filler - 1) + "\n" + SLURM_LINE
    assert AttributionCache(proc_tree(tmp_path, {9: text})).of(9).slurm_job_id == job


def test_a_colon_in_the_path_and_a_line_without_a_path_are_read_right() -> None:
    assert parse("0::/slurm/uid_0/job_7/step:0\n").slurm_job_id == "7"
    assert parse("0::/slurm/uid:0/job_7/step_0\n").slurm_job_id == "7"  # a colon before it
    assert parse("garbage:line\n1:x\n" + SLURM_LINE).slurm_job_id == "81235"


def test_pids_under_the_bound_stay_cached_and_are_not_read_again(tmp_path: Path) -> None:
    root = proc_tree(tmp_path, {pid: SLURM_LINE for pid in range(1, 5)})
    cache = AttributionCache(root, max_cached=4)
    for pid in range(1, 4):
        assert cache.of(pid).slurm_job_id == "81235"
    for pid in range(1, 4):
        (root / str(pid) / "cgroup").unlink()  # gone: only the cache can answer now
    assert [cache.of(pid).slurm_job_id for pid in range(1, 4)] == ["81235"] * 3
    assert len(cache) == 3
    assert cache.of(4).slurm_job_id == "81235" and len(cache) == 4  # at the bound: kept
    assert cache.of(5) == Attribution() and len(cache) == 4  # unreadable: not cached
    (root / "6").mkdir()
    (root / "6" / "cgroup").write_text(SLURM_LINE)
    assert cache.of(6).slurm_job_id == "81235" and len(cache) == 1  # past it: starts again


def test_an_attribution_cannot_be_changed() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        parse(SLURM_LINE).slurm_job_id = "1"  # type: ignore[misc]
