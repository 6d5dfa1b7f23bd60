"""A real one-node Slurm for the tests: Debian's munged, slurmctld and slurmd (22.05), started
in a temp dir on free loopback ports, ready when ``scontrol ping`` says UP and ``sinfo`` shows
the node idle; stopped, and the dir removed, on exit. Installed by `make slurm-tools` (make
test); the recipe is ../shared/TOOLING.md's.

The daemons need root: slurmd starts each task as the user who submitted it, and munged runs
as the ``munge`` user. Where they cannot start, ``SlurmUnavailable`` says why (the caller skips).
Nothing outside the temp dir is touched: munged gets a key and a socket of its own
(slurm.conf's ``AuthInfo=socket=``), so a munged the machine runs is left alone.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from benchmarks.stack import GiveUp, free_port, require_binary, wait_until


class SlurmUnavailable(Exception):
    """The daemons cannot run here; the message says why."""


MUNGE_USER = "munge"  # munged runs as this user, which Debian's munge package makes


@dataclass(frozen=True)
class Slurm:
    """A running cluster: its slurm.conf, its one node's name and the daemons' logs."""

    conf: Path
    node: str
    logs: Path

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """A client command (srun, sinfo, scontrol) against this cluster."""
        return subprocess.run(list(argv), env={**(env or self.env), "SLURM_CONF": str(self.conf)},
                              capture_output=True, text=True, timeout=timeout, check=False)

    def job_ids(self, name: str) -> list[str]:
        """The ids of the jobs named ``name`` that slurmctld still holds (finished ones too)."""
        out = self.run(["scontrol", "show", "jobs", "-o"]).stdout
        fields = [dict(f.split("=", 1) for f in line.split() if "=" in f)
                  for line in out.splitlines()]
        return [f["JobId"] for f in fields if f.get("JobName") == name]

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.logs.glob("*.log")))


def _conf(node: str, root: Path, socket_path: Path) -> str:
    return "\n".join([
        "ClusterName=trainwatch-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={socket_path}",
        # No systemd here, so no cgroup tracking: /proc/<pid>/cgroup shows / for the tasks.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "ReturnToService=2",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldLogFile={root / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'logs' / 'slurmd.log'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        ""])


def _munge_dir(root: Path) -> tuple[Path, Path, int]:
    """munged's own dir (owned by munge, traversable, as munged insists) with a fresh key."""
    try:
        munge = pwd.getpwnam(MUNGE_USER)
    except KeyError:
        raise SlurmUnavailable(f"no {MUNGE_USER!r} user: munge is not installed") from None
    path = root / "munge"
    path.mkdir(mode=0o755)
    key = path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for p in (path, key):
        os.chown(p, munge.pw_uid, munge.pw_gid)
    return path, key, munge.pw_uid


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def start_slurm() -> Iterator[Slurm]:
    """A one-node cluster of this machine's CPUs; ``SlurmUnavailable`` if it cannot start."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurmd and munged need root (slurmd starts each task as its "
                               f"user, munged runs as {MUNGE_USER!r}); this runs as uid "
                               f"{os.geteuid()}")
    binaries = [require_binary(b) for b in ("munged", "slurmctld", "slurmd", "srun")]
    # In /tmp itself: munged, as the munge user, must reach its dir (pytest's are 0700).
    root = Path(tempfile.mkdtemp(prefix="trainwatch-slurm-"))
    root.chmod(0o755)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for sub in ("state", "spool", "logs"):
            (root / sub).mkdir()
        munge_dir, key, munge_uid = _munge_dir(root)
        sock = munge_dir / "munge.socket"
        node = socket.gethostname().split(".")[0]
        conf = root / "slurm.conf"
        conf.write_text(_conf(node, root, sock))
        slurm = Slurm(conf, node, root / "logs")

        def daemon(argv: list[str], log: str, **kwargs: object) -> None:
            with open(root / "logs" / log, "ab") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                              env=slurm.env, start_new_session=True,
                                              **kwargs))  # type: ignore[call-overload]

        daemon([binaries[0], "-F", f"--socket={sock}", f"--key-file={key}",
                f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'seed'}",
                f"--log-file={munge_dir / 'munged.log'}"], "munged-stdout.log", user=munge_uid)
        wait_until(lambda: _alive(procs) and sock.exists(), timeout=10, what="munged's socket")
        daemon([binaries[1], "-D", "-i"], "slurmctld-stdout.log")
        wait_until(lambda: _alive(procs) and "is UP" in slurm.run(["scontrol", "ping"]).stdout,
                   timeout=30, what="slurmctld (scontrol ping)")
        daemon([binaries[2], "-D"], "slurmd-stdout.log")
        wait_until(lambda: _alive(procs) and slurm.run(
            ["sinfo", "-h", "-n", node, "-o", "%T"]).stdout.strip() == "idle",
            timeout=30, what=f"node {node} idle (sinfo)")
    except (TimeoutError, GiveUp, OSError) as err:
        log = Slurm(root / "slurm.conf", "", root / "logs").log()
        munged_log = root / "munge" / "munged.log"
        if munged_log.exists():
            log += f"\n--- munged.log\n{munged_log.read_text(errors='replace')[-2000:]}"
        _stop(procs)
        shutil.rmtree(root, ignore_errors=True)
        raise SlurmUnavailable(f"the Slurm daemons did not start: {err}\n{log}") from None
    try:
        yield slurm
    finally:
        _stop(procs)
        shutil.rmtree(root, ignore_errors=True)


def _alive(procs: list[subprocess.Popen[bytes]]) -> bool:
    for proc in procs:
        if proc.poll() is not None:
            raise GiveUp(f"{Path(cast(list[str], proc.args)[0]).name} exited with "
                         f"{proc.returncode}")
    return True
