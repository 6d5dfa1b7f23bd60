"""Hostile and unlucky config files: each exits 2 with one short line within a second.

Today's probes (issue 11): a "billion laughs" file hung 34 s and died with a MemoryError at
2.5 GB, a 20,000-deep list printed a 2,989-line RecursionError, ``/dev/zero`` a MemoryError
after 8 s, and a FIFO hung forever.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.stack import REPO
from exporter.cli import main
from exporter.configfile import MAX_BYTES
from exporter.webauth import hash_password


def laughs(levels: int = 9, fan_out: int = 9) -> str:
    """The classic alias bomb: ``fan_out ** levels`` strings from a few hundred bytes."""
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * fan_out)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def indented(text: str, by: int) -> str:
    return "".join(" " * by + line + "\n" for line in text.splitlines())


BOMB_CASES = {
    "log.level": f"x:\n{indented(laughs(), 2)}log:\n  level: *a9\n",
    "a section": f"x: &x\n{indented(laughs(), 2)}web: *x\n",
    "basic_auth_users": f"web:\n  basic_auth_users:\n{indented(laughs(), 4)}",
}


def exit_line(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, float]:
    start = time.perf_counter()
    code = main(["--no-collector.gpu", *argv])
    elapsed = time.perf_counter() - start
    return code, capsys.readouterr().err, elapsed


def assert_one_short_line(code: int, err: str, elapsed: float, expected: str,
                          prefix: str = "config file ") -> None:
    assert code == 2
    assert err.startswith("trainwatch-exporter: error: " + prefix)
    # Short whatever the file's own path (pytest's temporary folders vary in length).
    assert err.count("\n") == 1 and len(re.sub(r"/\S+: ", "PATH: ", err, count=1)) < 240, \
        err[:500]
    assert expected in err
    assert elapsed < 1.0, f"took {elapsed:.2f} s"


@pytest.mark.parametrize("where", sorted(BOMB_CASES))
def test_an_alias_bomb_is_refused_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          where: str) -> None:
    path = tmp_path / "bomb.yml"
    path.write_text(BOMB_CASES[where])
    assert_one_short_line(*exit_line(capsys, "--config", str(path)),
                          expected="YAML aliases (*name) are not allowed")


def test_the_alias_message_names_where(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    path = tmp_path / "alias.yml"
    path.write_text("log: &l {level: info}\ngpu: *l\n")
    code, err, _ = exit_line(capsys, "--config", str(path))
    assert code == 2
    assert err == (f"trainwatch-exporter: error: config file {path}: refused: line 2, "
                   "column 6: YAML aliases (*name) are not allowed\n")


def test_deep_nesting_is_refused_without_a_traceback(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    path = tmp_path / "deep.yml"
    path.write_text("log:\n  level: " + "[" * 20_000 + "]" * 20_000 + "\n")
    assert_one_short_line(*exit_line(capsys, "--config", str(path)),
                          expected="nested deeper than 16 levels")


def test_dev_zero_is_not_a_regular_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_short_line(*exit_line(capsys, "--config", "/dev/zero"),
                          expected="config file /dev/zero: not a regular file")


def test_a_fifo_is_refused_without_waiting_for_a_writer(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    assert_one_short_line(*exit_line(capsys, "--config", str(fifo)),
                          expected="not a regular file")


def test_a_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert_one_short_line(*exit_line(capsys, "--config", str(tmp_path)),
                          expected="not a regular file")


def test_an_oversized_file_is_refused_unread(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    with path.open("wb") as out:  # sparse: the size is what counts
        out.truncate(64 * 1024 * 1024)
    assert_one_short_line(*exit_line(capsys, "--config", str(path)),
                          expected=f"over the limit of {MAX_BYTES}")


@pytest.mark.parametrize(("text", "expected"), [
    ("log:\n  level: " + "x" * 200_000 + "\n", "log.level must be one of"),
    ("log:\n  level: [" + ", ".join(["1"] * 50_000) + "]\n", "more than 10000 values"),
    ("web:\n  listen_address: '" + "9" * 200_000 + "'\n", "invalid listen address"),
    ("x" * 1000 + ":\n  a: 1\n", "unknown key 'xxxxx"),
    ("web:\n  basic_auth_users:\n    " + "u" * 1000 + ": plain\n", "web.basic_auth_users.uuu"),
])
def test_a_huge_value_is_quoted_cut_short(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          text: str, expected: str) -> None:
    path = tmp_path / "huge.yml"
    path.write_text(text)
    assert_one_short_line(*exit_line(capsys, "--config", str(path)), expected=expected)


def test_an_absurd_iteration_count_is_refused_at_load(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    # Accepted today, then every login failed with an OverflowError logged only at debug.
    encoded = hash_password("pw", iterations=1000).replace("$1000$", "$999999999999$")
    path = tmp_path / "auth.yml"
    path.write_text(f"web:\n  basic_auth_users:\n    prometheus: '{encoded}'\n")
    assert_one_short_line(*exit_line(capsys, "--config", str(path)),
                          expected="web.basic_auth_users.prometheus: 999999999999 iterations "
                                   "is over the limit of 2000000")


@pytest.mark.parametrize("kind", ["bomb", "fifo"])
def test_the_real_process_exits_2_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(BOMB_CASES["log.level"])
    proc = subprocess.run([sys.executable, "-m", "exporter", "--no-collector.gpu",
                           "--config", str(path)], check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"trainwatch-exporter: error: config file {path}: ")
    assert proc.stderr.count("\n") == 1


TLS_CERT = Path(__file__).with_name("test_exporter_tls.crt")
TLS_KEY = Path(__file__).with_name("test_exporter_tls.key")
PASSPHRASE_KEY = Path(__file__).with_name("test_exporter_tls_passphrase.key")  # "secret"


@pytest.mark.parametrize("which", ["cert", "key"])
def test_a_fifo_as_tls_file_is_refused_at_once(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, which: str) -> None:
    fifo = tmp_path / f"tls.{which}"
    os.mkfifo(fifo)  # today: load_cert_chain waited for a writer, forever
    cert, key = (fifo, TLS_KEY) if which == "cert" else (TLS_CERT, fifo)
    path = tmp_path / "tls.yml"
    path.write_text(f"web:\n  tls_cert_file: {cert}\n  tls_key_file: {key}\n")
    assert_one_short_line(*exit_line(capsys, "--config", str(path)), prefix="",
                          expected=f"web.tls_{which}_file: {fifo}: cannot load TLS")


def test_a_key_behind_a_passphrase_is_named_not_prompted_for(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    path = tmp_path / "tls.yml"
    path.write_text(f"web:\n  tls_cert_file: {TLS_CERT}\n  tls_key_file: {PASSPHRASE_KEY}\n")
    code, err, elapsed = exit_line(capsys, "--config", str(path))
    assert_one_short_line(code, err, elapsed, prefix="",
                          expected=f"web.tls_key_file: {PASSPHRASE_KEY}: protected by a "
                                   "passphrase")


@pytest.mark.parametrize(("hashed", "expected"), [
    ("pbkdf2_sha256$1000$NaCl$", "the hash part is 0 bytes, not the 32 of a SHA-256 digest"),
    ("pbkdf2_sha256$1000$NaCl$AAAA", "the hash part is 3 bytes"),
    ("pbkdf2_sha256$" + "9" * 5000 + "$NaCl$Imh763JHpNtotacn8DcAwY+kYUnmnd4ansM++FZKFSs=",
     "99999999999999999... iterations is over the limit of 2000000"),
])
def test_a_hash_no_password_can_match_is_refused(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path, hashed: str,
                                                 expected: str) -> None:
    path = tmp_path / "auth.yml"
    path.write_text(f"web:\n  basic_auth_users:\n    prometheus: '{hashed}'\n")
    assert_one_short_line(*exit_line(capsys, "--config", str(path)),
                          expected=f"web.basic_auth_users.prometheus: {expected}")


def test_a_bind_error_is_the_only_line_even_with_the_gpu_collector(tmp_path: Path) -> None:
    """Today the NVML warning (no GPU here) was printed first, then the real error."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "exporter", "--collector.gpu",
                               f"--web.listen-address=127.0.0.1:{port}"], check=False,
                              cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == (f"trainwatch-exporter: error: cannot listen on '127.0.0.1:{port}': "
                           "Address already in use\n")
    assert time.monotonic() - start < 10  # the interpreter's start, then at once
