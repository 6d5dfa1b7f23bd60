"""mutation/survivors.py's bookkeeping (the cosmic-ray runs themselves are make mutation's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mutation.survivors import record, same


def test_a_rerun_survivor_takes_its_new_status_and_the_others_keep_theirs() -> None:
    def mutant(line: int, diff: str, status: str) -> dict[str, Any]:
        return {"module": "m.py", "operator": "core/X", "line": line, "diff": diff,
                "status": status}

    last: dict[str, Any] = {"mutants": [mutant(3, "-a\n+b", "survived"), mutant(3, "-a\n+c", "survived"),
                        mutant(9, "-a\n+b", "killed")], "reruns": ["before"]}
    record(last, [({"module": "m.py", "operator": "core/X", "line": 3, "diff": "-a\n+c"},
                   "killed")], "now")
    assert [m["status"] for m in last["mutants"]] == ["survived", "killed", "killed"]
    assert last["reruns"] == ["before", "now"]
    fresh: dict[str, Any] = {"mutants": []}
    record(fresh, [], "first")
    assert fresh["reruns"] == ["first"]


def test_a_module_is_the_same_only_byte_for_byte(tmp_path: Path) -> None:
    ran, now = tmp_path / "ran", tmp_path / "now"
    for root in (ran, now):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "a.py").write_text("x = 1\n")
        (root / "one.py").write_text("y = 2\n")
    assert same(ran / "pkg", now / "pkg") and same(ran / "one.py", now / "one.py")
    (now / "one.py").write_text("y = 3\n")
    assert not same(ran / "one.py", now / "one.py")
    (now / "pkg" / "b.py").write_text("")
    assert not same(ran / "pkg", now / "pkg")
    assert not same(ran / "gone.py", now / "gone.py")


def test_a_rerun_refuses_tests_that_fail_unmutated_and_a_second_rerun_of_its_target(
        tmp_path: Path, monkeypatch: Any) -> None:
    import fcntl

    import pytest

    from mutation import survivors

    state = tmp_path / "state"
    (state / "results").mkdir(parents=True)
    (state / "results" / "t.json").write_text('{"mutants": []}')
    (state / "t.sqlite").write_text("")
    monkeypatch.setattr(survivors, "STATE", state)
    monkeypatch.setattr(survivors, "RESULTS", state / "results")
    monkeypatch.setattr(survivors, "same", lambda ran, now: True)
    monkeypatch.setattr(survivors, "copy_tree", lambda work: work.mkdir(parents=True,
                                                                        exist_ok=True))
    target = {"name": "t", "module": "m.py", "tests": ["-c", "/dev/null", "--co", "nothing.py"]}
    with pytest.raises(SystemExit, match="the tests fail without a mutant"):
        survivors.rerun(target)
    held = (state / "survivors-t.lock").open("w")
    fcntl.flock(held, fcntl.LOCK_EX)
    with pytest.raises(SystemExit, match="being run again already"):
        survivors.rerun(target)


def test_a_timed_out_run_leaves_no_process_of_it_running(tmp_path: Path) -> None:
    """kill_tree takes the worker and what it started in a session of its own (as cosmic-ray
    starts pytest), and never the caller's own group."""
    import os
    import subprocess
    import sys
    import time

    from mutation.run import kill_tree
    from trainwatch.procs import start_time

    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(300)\n")
    worker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert worker.stdout is not None
    child = int(worker.stdout.readline())
    assert os.getpgid(child) == child != os.getpgid(worker.pid)
    kill_tree(worker.pid)
    assert worker.wait(timeout=10) == -9
    deadline = time.monotonic() + 10
    while start_time(child) is not None:  # None: gone, or a zombie (nothing left running)
        assert time.monotonic() < deadline, "the worker's child runs on"
        time.sleep(0.01)
    mine = subprocess.Popen(["sleep", "300"])  # in this process's group: only it is killed
    kill_tree(mine.pid)
    assert mine.wait(timeout=10) == -9
    kill_tree(mine.pid)  # gone: no error

