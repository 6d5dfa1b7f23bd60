"""Each target's last result, kept in the repository (mutation/results/NAME.json).

run.py keeps a whole run (every mutant, with its diff) in .mutation/results/, which a fresh
clone does not have: a report written from it alone named only the targets run on that
machine. The ledger keeps what the report needs of every target's last run, committed beside
the tests: its counts, its survivors and unrunnable mutants (with their diffs), when it ran and
on which commit, so docs/mutation-report.md is written from every target wherever it is run.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path
from typing import Any

LEDGER = Path(__file__).resolve().parent / "results"


def head(repo: Path, module: str) -> str:
    """The commit a run mutated: HEAD's short hash, with ``+ edits`` when the module (a file
    or a package) differs from it in the working tree, ``not a git checkout`` outside one."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                              check=False)
    found = git("rev-parse", "--short", "HEAD")
    if found.returncode != 0:
        return "not a git checkout"
    edited = (git("diff", "--quiet", "HEAD", "--", module).returncode != 0
              or bool(git("ls-files", "-o", "--exclude-standard", "--", module).stdout.strip()))
    return found.stdout.strip() + (" + edits" if edited else "")


def summary(result: dict[str, Any], ran: str, on: str) -> dict[str, Any]:
    """What the report needs of a run: its killed mutants counted, the others kept whole."""
    kept = {key: value for key, value in result.items() if key != "mutants"}
    mutants = result["mutants"]
    return {**kept, "date": ran, "head": on,
            "killed": result.get("killed", 0) + sum(m["status"] == "killed" for m in mutants),
            "mutants": [m for m in mutants if m["status"] != "killed"]}


def save(result: dict[str, Any], repo: Path, ledger: Path = LEDGER,
         ran: str | None = None) -> Path:
    """Write ``result``'s summary to the ledger (today; at the commit its run noted when it
    copied the module, else the module's commit now); its path."""
    ledger.mkdir(parents=True, exist_ok=True)
    path = ledger / f"{result['name']}.json"
    path.write_text(json.dumps(summary(result, ran or datetime.date.today().isoformat(),
                                       result.get("head") or head(repo, result["module"])),
                               indent=1) + "\n")
    return path


def load(names: list[str], ledger: Path = LEDGER) -> tuple[list[dict[str, Any]], list[str]]:
    """The ledger's results of ``names`` (in that order) and the names it has none for."""
    found = [(name, ledger / f"{name}.json") for name in names]
    return ([json.loads(p.read_text()) for _, p in found if p.exists()],
            [name for name, p in found if not p.exists()])


def changed_since(result: dict[str, Any], repo: Path) -> bool:
    """Whether the module differs now (working tree) from the commit its last run mutated:
    that run's score no longer describes it. A run of uncommitted edits counts as changed."""
    on = str(result.get("head", ""))
    if not on or on == "not a git checkout" or " " in on:
        return True
    return subprocess.run(["git", "diff", "--quiet", on, "--", result["module"]], cwd=repo,
                          capture_output=True, check=False).returncode != 0
