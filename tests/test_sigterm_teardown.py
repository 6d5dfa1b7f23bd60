"""A pytest run killed with SIGTERM stops what its fixtures started (tests/sigterm_teardown.py):
a fixture starts a process in a session of its own, as the live stacks start Prometheus and the
trials, and a pytest signalled mid-test must tear it down before exiting. Without the plugin
the process outlives pytest (the other direction, which is what the plugin is for)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stack import REPO, wait_until

INNER = '''
import subprocess, sys, time
from pathlib import Path
import pytest

HERE = Path(__file__).parent

@pytest.fixture
def service():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    (HERE / "service.pid").write_text(str(proc.pid))
    yield proc
    proc.terminate()
    proc.wait()
    (HERE / "torn-down").write_text("yes")

def test_runs_until_signalled(service):
    (HERE / "ready").write_text("yes")
    time.sleep(120)  # the outer test signals pytest long before this ends
'''


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def signalled_run(tmp_path: Path, *plugin: str) -> tuple[int, int]:
    """pytest on INNER, SIGTERM once its test runs: its exit code and the service's pid."""
    (tmp_path / "test_inner.py").write_text(INNER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
         str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (tmp_path / "ready").exists(), 60, "the inner test to start")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, int((tmp_path / "service.pid").read_text())


def test_sigterm_tears_the_fixtures_down(tmp_path: Path) -> None:
    code, pid = signalled_run(tmp_path, "-p", "tests.sigterm_teardown")
    assert (tmp_path / "torn-down").exists()
    assert not alive(pid)
    assert code == pytest.ExitCode.INTERRUPTED


def test_without_it_the_service_outlives_pytest(tmp_path: Path) -> None:
    code, pid = signalled_run(tmp_path)
    try:
        assert alive(pid) and not (tmp_path / "torn-down").exists()
        assert code == -signal.SIGTERM
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
