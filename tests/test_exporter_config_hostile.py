"""Hostile and unlucky config files: each exits 2 with one short line within a second.

Today's probes (issue 11): a "billion laughs" file hung 34 s and died with a MemoryError at
2.5 GB, a 20,000-deep list printed a 2,989-line RecursionError, ``/dev/zero`` a MemoryError
after 8 s, and a FIFO hung forever.
"""

from __future__ import annotations

import os
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


def assert_one_short_line(code: int, err: str, elapsed: float, expected: str) -> None:
    assert code == 2
    assert err.startswith("trainwatch-exporter: error: config file ")
    assert err.count("\n") == 1 and len(err) < 300, err[:500]
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
