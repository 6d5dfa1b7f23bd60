"""``make mutation CHANGED=1``: mutate only the lines a change touched (mutation/run.py).

What counts as the change: everything since ``MUTATION_BASE`` (default: the merge base with
``origin/main`` where that exists, else ``HEAD``, i.e. the uncommitted edits), untracked files
included whole. A target runs when its module has changed lines; of its mutants only those
starting on a changed line run, the others are skipped (cosmic-ray's SKIPPED, "unchanged
line"), so a typical change runs in minutes, not the module's whole set. Product modules with
changed lines and no target are named, so the gap shows.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
PRODUCT = ("exporter/", "trial_instrumentation/", "trainwatch/", "prometheus/rulegen/",
           "grafana/", "helm/")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def default_base(repo: Path) -> str:
    """The merge base with origin/main where there is one, else HEAD (uncommitted edits)."""
    try:
        return _git(repo, "merge-base", "HEAD", "origin/main").strip()
    except subprocess.CalledProcessError:
        return "HEAD"


def changed_lines(diff: str) -> dict[str, set[int]]:
    """Added or changed lines of each file (new-side numbers) of a ``git diff -U0`` text."""
    found: dict[str, set[int]] = {}
    path = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = None if line == "+++ /dev/null" else line[len("+++ b/"):]
            if path is not None:
                found.setdefault(path, set())
        elif path is not None and (m := HUNK.match(line)):
            start, count = int(m[1]), 1 if m[2] is None else int(m[2])
            found[path].update(range(start, start + count))
    return {p: lines for p, lines in found.items() if lines}


def changes(repo: Path, base: str) -> dict[str, set[int]]:
    """Changed lines per .py file since ``base``, working tree included; untracked files whole."""
    found = changed_lines(_git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", base, "--",
                               "*.py"))
    for name in _git(repo, "ls-files", "-o", "--exclude-standard", "--", "*.py").split():
        text = (repo / name).read_text(encoding="utf-8", errors="replace")
        found[name] = set(range(1, len(text.splitlines()) + 1))
    return found


def in_module(path: str, module: str) -> bool:
    """A file of a target's module (a file, or a package folder)."""
    return path == module or path.startswith(module.rstrip("/") + "/")


def pick(targets: dict[str, dict], found: dict[str, set[int]]) -> tuple[list[str], list[str]]:
    """The targets whose module has changed lines; the changed product files no target covers."""
    chosen = [name for name, t in targets.items()
              if any(in_module(path, t["module"]) for path in found)]
    uncovered = sorted(path for path in found if path.startswith(PRODUCT)
                       and not path.startswith("tests/")
                       and not any(in_module(path, t["module"]) for t in targets.values()))
    return chosen, uncovered
