"""`make mutation CHANGED=1` (mutation/changed.py): which lines a change touched, read from a
real git repository's diff, and which targets they pick."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mutation.changed import changed_lines, changes, in_module, pick


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


def test_changed_lines_are_the_new_sides_added_and_changed_lines(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 21)))
    (tmp_path / "b.py").write_text("y = 1\nz = 2\n")
    (tmp_path / "notes.txt").write_text("n\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    lines = (tmp_path / "pkg" / "a.py").read_text().splitlines()
    lines[2] = "x3 = 30"  # changed: line 3
    del lines[9]  # removed: no new-side line
    lines[14:14] = ["new1 = 1", "new2 = 2"]  # added: lines 15, 16 of the new file
    (tmp_path / "pkg" / "a.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "c.py").write_text("a = 1\nb = 2\nc = 3\n")  # untracked: whole
    (tmp_path / "notes.txt").write_text("changed\n")  # not Python: not a mutation's business
    found = changes(tmp_path, "HEAD")
    assert found == {"pkg/a.py": {3, 15, 16}, "c.py": {1, 2, 3}}
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "two")
    assert changes(tmp_path, "HEAD") == {}  # nothing since HEAD
    assert changes(tmp_path, "HEAD~1") == {"pkg/a.py": {3, 15, 16}, "c.py": {1, 2, 3}}


def test_a_deleted_file_and_a_pure_deletion_change_no_line() -> None:
    diff = ("diff --git a/gone.py b/gone.py\n--- a/gone.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n"
            "-a\n-b\n"
            "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -4 +3,0 @@\n-x\n"
            "@@ -9,0 +9 @@\n+y\n")
    assert changed_lines(diff) == {"k.py": {9}}


def test_targets_are_picked_by_their_module_file_or_folder_and_gaps_are_named() -> None:
    targets = {"rulegen": {"module": "prometheus/rulegen"},
               "gpu": {"module": "exporter/gpu.py"}}
    found = {"prometheus/rulegen/causes.py": {1}, "exporter/gpu_process.py": {2},
             "prometheus/rulegen_extra.py": {3}, "tests/test_x.py": {4}, "README.py": {5}}
    chosen, uncovered = pick(targets, found)
    assert chosen == ["rulegen"]  # gpu.py itself did not change; gpu_process.py is not it
    assert uncovered == ["exporter/gpu_process.py"]
    assert in_module("exporter/gpu.py", "exporter/gpu.py")
    assert not in_module("prometheus/rulegen_extra.py", "prometheus/rulegen")
    assert in_module("prometheus/rulegen/x.py", "prometheus/rulegen/")
