"""The CLI reads the stack it was pointed at (issue 38, item 8): `stack up` in a state
directory the CLI would not find prints the line that points it there, and a CLI pointed at a
state directory ($TRAINWATCH_STATE_DIR) that reads another Prometheus ($TRAINWATCH_PROMETHEUS)
says so in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.stack import REPO, start_prometheus
from trainwatch.layout import StateDir
from trainwatch.lookup import mismatch
from trainwatch.stack.up import cli_pointer

URL = "http://127.0.0.1:19090"


def test_up_in_a_state_directory_of_its_own_prints_the_line_that_points_the_cli_there():
    line = cli_pointer(StateDir.resolve("/tmp/d"), URL, {})
    assert line == f"export TRAINWATCH_STATE_DIR=/tmp/d TRAINWATCH_PROMETHEUS={URL}"


def test_up_where_the_cli_finds_it_already_prints_nothing():
    assert cli_pointer(StateDir.resolve("/tmp/d"), URL, {"TRAINWATCH_STATE_DIR": "/tmp/d"}) is None
    assert cli_pointer(StateDir.resolve("/tmp/d"), URL, {"TRAINWATCH_STATE_DIR": "/tmp/d",
                                                         "TRAINWATCH_PROMETHEUS": URL}) is None


def test_up_while_the_shell_points_at_another_prometheus_prints_the_line():
    env = {"TRAINWATCH_STATE_DIR": "/tmp/d", "TRAINWATCH_PROMETHEUS": "http://127.0.0.1:9090"}
    assert cli_pointer(StateDir.resolve("/tmp/d"), URL, env) == \
        f"export TRAINWATCH_STATE_DIR=/tmp/d TRAINWATCH_PROMETHEUS={URL}"


def test_another_stacks_prometheus_is_named_with_its_state_directory():
    mine = StateDir.resolve("/tmp/mine")
    assert mismatch(URL, Path("/tmp/mine/prometheus/data"), mine) is None
    said = mismatch(URL, Path("/tmp/theirs/prometheus/data"), mine)
    assert said is not None and "the trainwatch stack's in /tmp/theirs" in said
    assert "not the one in /tmp/mine" in said and "\n" not in said
    said = mismatch(URL, Path("/prometheus"), mine)
    assert said is not None and "no trainwatch stack's (its data: /prometheus)" in said


def _trials(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TRAINWATCH_PROMETHEUS", "TRAINWATCH_STATE_DIR")}
    return subprocess.run([sys.executable, "-m", "trainwatch.cli", "trials", *args],
                          env={**clean, **env}, cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_cli_pointed_at_a_state_directory_that_reads_another_prometheus_says_so(tmp_path):
    mine = tmp_path / "mine"
    with start_prometheus(tmp_path, {"scrape_configs": []}) as bare:
        pointed = _trials({"TRAINWATCH_PROMETHEUS": bare.url, "TRAINWATCH_STATE_DIR": str(mine)})
        only_url = _trials({"TRAINWATCH_PROMETHEUS": bare.url})
        explicit = _trials({"TRAINWATCH_STATE_DIR": str(mine)}, "--prometheus", bare.url)
    notes = [line for line in pointed.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1, pointed.stderr
    assert f"Prometheus at {bare.url}" in notes[0] and f"not the one in {mine}" in notes[0]
    assert "no trainwatch stack's" in notes[0]
    # Pointed at one thing only (the URL, or the URL on the command line): nothing to say.
    assert "note:" not in only_url.stderr and "note:" not in explicit.stderr
