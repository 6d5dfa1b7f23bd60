"""Bad input exits 2 with one line naming the problem; good input merges flags over the file."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stack import REPO
from exporter.cli import main, parse_settings
from exporter.webauth import hash_password

CERT = Path(__file__).with_name("test_exporter_tls.crt")


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trainwatch.yml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--collector.nope"], "unknown collector 'nope' (known: gpu, gpu_process, host)"),
    (["--no-collector.nope"], "unknown collector 'nope'"),
    (["--web.listen-address=nonsense"], "invalid listen address 'nonsense'"),
    (["--web.listen-address=127.0.0.1:99999"],
     "invalid listen address '127.0.0.1:99999': port 99999 is out of range 0-65535"),
    (["--web.listen-address=:99999"], "':99999': port 99999 is out of range 0-65535"),
    (["--web.listen-address=[::1]:123456"], "port 123456 is out of range 0-65535"),
    (["--log.format=xml"], "--log.format"),
    (["--host.disk-device-exclude=(zram"],
     "host.disk_device_exclude: '(zram' is not a regular expression"),
    # TEST-NET-1 is on no local interface: bind fails at once, without DNS or packets.
    (["--web.listen-address=192.0.2.1:10910"], "cannot listen on '192.0.2.1:10910'"),
    (["--log.level=loud"], "--log.level"),
    (["--gpu.nvml-retry-seconds=soon"], "--gpu.nvml-retry-seconds"),
    (["--gpu.nvml-retry-seconds=-1"], "gpu.nvml_retry_seconds must be a finite number >= 0"),
    (["--gpu.nvml-retry-seconds=nan"], "gpu.nvml_retry_seconds must be a finite number >= 0"),
    (["--web.tls-cert-file", str(CERT)], "must be given together"),
    (["--web.listen-address=127.0.0.1:0", "--web.tls-cert-file=/nope.crt",
      "--web.tls-key-file=/nope.key"], "web.tls_cert_file: /nope.crt: cannot load TLS certificate"),
    (["--config", "/nonexistent/trainwatch.yml"],
     "config file /nonexistent/trainwatch.yml: No such file or directory"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_bad_flags_exit_2_naming_the_problem(capsys: pytest.CaptureFixture[str],
                                              argv: list[str], expected: str) -> None:
    code, err = run_main(capsys, "--no-collector.gpu", *argv)
    assert code == 2
    assert expected in err
    assert err.startswith("trainwatch-exporter: error: ") and err.count("\n") == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("web: [unclosed\n", "invalid YAML"),
    ("web:\n  listen_adress: ':1'\n", "unknown key 'web.listen_adress'"),
    ("webb:\n  listen_address: ':1'\n", "unknown key 'webb'"),
    ("collector:\n  nope: true\n", "unknown collector 'nope'"),
    ("collector:\n  gpu: 'yes'\n", "collector.gpu must be a bool, not 'yes'"),
    ("web: ':10910'\n", "web must be a mapping"),
    ("- web\n", "expected a mapping with sections"),
    ("web:\n  listen_address: 'nonsense'\n", "invalid listen address 'nonsense'"),
    ("web:\n  basic_auth_users:\n    prometheus: plaintext\n",
     "web.basic_auth_users.prometheus: expected pbkdf2_sha256$"),
    ("log:\n  level: loud\n", "log.level must be one of debug, info, warn, error"),
    ("gpu:\n  nvml_retry_seconds: -5\n", "gpu.nvml_retry_seconds must be a finite number >= 0"),
])
def test_bad_config_files_exit_2_naming_file_and_key(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path, text: str,
                                                     expected: str) -> None:
    path = write(tmp_path, text)
    code, err = run_main(capsys, "--config", path)
    assert code == 2
    assert expected in err
    assert f"config file {path}" in err
    assert err.count("\n") == 1


def test_a_config_file_that_is_not_text_exits_2(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    path = tmp_path / "trainwatch.yml"
    path.write_bytes(b"web:\n  listen_address: '\xff\xfe'\n")
    code, err = run_main(capsys, "--config", str(path))
    assert code == 2
    assert f"config file {path}: not UTF-8 text" in err and err.count("\n") == 1


def test_a_port_in_use_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(capsys, "--no-collector.gpu", f"--web.listen-address=127.0.0.1:{port}")
    assert code == 2
    assert f"cannot listen on '127.0.0.1:{port}': Address already in use" in err


def test_the_real_process_exits_2_without_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "exporter", "--collector.nvidia"],
                          check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("trainwatch-exporter: error: unknown collector 'nvidia' "
                           "(known: gpu, gpu_process, host)\n")


def test_flags_win_over_the_file_and_the_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
web:
  listen_address: "127.0.0.1:20000"
  basic_auth_users:
    prometheus: "{hash_password('pw', iterations=1000)}"
collector:
  gpu: false
  gpu_process: true
gpu:
  pcie_throughput: false
  nvml_retry_seconds: 5
log:
  level: debug
""")
    settings = parse_settings(["--config", path, "--web.listen-address=127.0.0.1:20001",
                               "--collector.gpu", "--log.level=warn"])
    assert settings.web_listen_address == "127.0.0.1:20001"
    assert settings.collectors == {"gpu": True, "host": True, "gpu_process": True}
    assert settings.gpu_pcie_throughput is False
    assert settings.gpu_nvml_retry_seconds == 5.0
    assert settings.log_level == "warn"
    assert set(settings.web_basic_auth_users) == {"prometheus"}


def test_defaults() -> None:
    settings = parse_settings([])
    assert settings.web_listen_address == ":10910"
    assert settings.collectors == {"gpu": True, "host": True, "gpu_process": False}
    assert settings.gpu_pcie_throughput is True
