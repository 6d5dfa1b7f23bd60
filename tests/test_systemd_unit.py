"""The exporter's systemd unit (exporter/systemd/trainwatch-exporter.service): systemd's own
checker accepts it, it is hardened (no root, read-only system, NVIDIA devices only) and
`systemd-analyze security` rates it so, its ExecStart flags are ones the exporter's parser
accepts, and its ExecReload reloads the web config of a running exporter."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stack import REPO, Service, free_port, http_get, require_binary, wait_until
from exporter.cli import PROG, parse_flags
from exporter.config import ConfigError, merge
from exporter.webauth import hash_password

UNIT = REPO / "exporter" / "systemd" / "trainwatch-exporter.service"
DOC = REPO / "docs" / "slurm.md"
# The console script this checkout's venv installed: what ExecStart's program is once installed.
INSTALLED = Path(sys.executable).parent / PROG
# `systemd-analyze security`'s overall exposure, times 10, that the unit must stay within
# ("OK" is below 3.0; the same unit run as root rates worse than this).
EXPOSURE_LIMIT = 20


def read_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> every value assigned, as systemd reads a unit file: comments, trailing
    backslashes joining lines, a key assigned again adding a value."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


SERVICE = read_unit(UNIT.read_text())["Service"]


def one(key: str) -> str:
    [value] = SERVICE[key]
    return value


def exec_start() -> list[str]:
    return shlex.split(one("ExecStart"))


def installed_copy(tmp_path: Path, text: str | None = None) -> Path:
    """The unit (or ``text``) with ExecStart's program the installed console script, so that
    systemd-analyze finds it executable; nothing else is changed."""
    text = UNIT.read_text() if text is None else text
    program = exec_start()[0]
    assert text.count(program) == 1
    path = tmp_path / UNIT.name
    path.write_text(text.replace(program, str(INSTALLED)))
    return path


def analyze(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("systemd-analyze"), *map(str, args)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_systemd_analyze_verify_accepts_it_without_a_warning(tmp_path: Path) -> None:
    assert INSTALLED.exists(), f"{INSTALLED}: the venv has no {PROG}"
    done = analyze("verify", installed_copy(tmp_path))
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    # The checker speaks up on a misspelt hardening key, which systemd would ignore.
    typo = installed_copy(tmp_path, UNIT.read_text().replace("ProtectSystem=", "ProtectSytem="))
    done = analyze("verify", typo)
    assert "Unknown key" in done.stdout + done.stderr and "ProtectSytem" in done.stderr


def test_it_runs_as_no_root_on_a_read_only_system_with_nvidias_devices_only() -> None:
    hardening = {"DynamicUser": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                 "NoNewPrivileges": "yes", "PrivateTmp": "yes", "DevicePolicy": "closed",
                 "CapabilityBoundingSet": "", "AmbientCapabilities": "",
                 "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX"}
    assert {key: one(key) for key in hardening} == hardening
    assert "User" not in SERVICE and "Group" not in SERVICE  # never a fixed (root) user
    # NVML's control and GPU devices (major 195, under each name drivers give it in
    # /proc/devices) read-write, MIG's capabilities read-only; a private /dev would hide them.
    assert SERVICE["DeviceAllow"] == ["char-nvidia rw", "char-nvidiactl rw",
                                      "char-nvidia-frontend rw", "char-nvidia-caps r"]
    assert "PrivateDevices" not in SERVICE
    # gpu_process reads other users' /proc/<pid>/cgroup: the process tree stays visible.
    assert "ProtectProc" not in SERVICE and "ProcSubset" not in SERVICE


def test_systemd_analyze_security_rates_it_ok_and_worse_as_root(tmp_path: Path) -> None:
    threshold = f"--threshold={EXPOSURE_LIMIT}"
    done = analyze("security", "--offline=yes", threshold, installed_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Overall exposure level for \S+: \d\.\d OK", done.stdout), done.stdout
    as_root = UNIT.read_text().replace("DynamicUser=yes\n", "")
    root_dir = tmp_path / "root"
    root_dir.mkdir()
    done = analyze("security", "--offline=yes", threshold, installed_copy(root_dir, as_root))
    assert done.returncode != 0, done.stdout


def test_execstart_flags_are_ones_the_exporters_parser_accepts() -> None:
    program, *flags = exec_start()
    assert Path(program).name == PROG
    config, given = parse_flags(flags)
    settings = merge(file={}, flags=given)  # every value checked as at start
    assert config == "/etc/trainwatch/exporter.yml"
    assert "gpu_process" in settings.enabled_collectors
    assert settings.web_listen_address == ":10910"
    with pytest.raises(ConfigError, match="unknown"):
        parse_flags([*flags, "--web.listen-adress=:1"])


def test_the_walkthrough_installs_what_execstart_runs_and_reads() -> None:
    doc = DOC.read_text()
    program, *flags = exec_start()
    config, _ = parse_flags(flags)
    venv = str(Path(program).parent.parent)
    assert config is not None
    assert f"python3 -m venv {venv}" in doc and f"{venv}/bin/pip install" in doc
    assert config in doc and f"exporter/systemd/{UNIT.name}" in doc


def test_execreload_reloads_a_running_exporters_web_config(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yml"
    config.write_text("")
    port = free_port()
    flags = [f"--config={config}" if f.startswith("--config") else
             f"--web.listen-address=127.0.0.1:{port}" if f.startswith("--web.listen") else f
             for f in exec_start()[1:]]
    with Service("exporter", [sys.executable, "-m", "exporter", *flags], port, tmp_path,
                 ready_path="/healthz") as exporter:
        # Started with no users; the file now has one (its users are read again, not the
        # ones of the start: 1 user, not 0).
        config.write_text("web:\n  basic_auth_users:\n    prometheus: "
                          f"'{hash_password('s3cret', iterations=1000)}'\n")
        reloaded = "web config reloaded (SIGHUP): 1 basic-auth user(s), TLS off"
        assert reloaded not in exporter.log()
        reload = shlex.split(one("ExecReload").replace("$MAINPID", str(exporter.proc.pid)))
        subprocess.run(reload, check=True, timeout=10)
        wait_until(lambda: reloaded in exporter.log(), timeout=10, what="the reload's log line")
        # SIGHUP's default action would have ended it.
        assert exporter.proc.poll() is None
        assert http_get(exporter.url + "/healthz")[0] == 200
        assert http_get(exporter.url + "/metrics")[0] == 401  # the new user's password asked
