"""mutation/ledger.py: the committed summary of each target's last run, the report's source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from mutation.ledger import head, load, save, summary
from mutation.report import write_report


def mutant(line: int, status: str) -> dict[str, Any]:
    return {"module": "pkg/m.py", "operator": "core/X", "line": line, "source": f"x = {line}",
            "status": status, "diff": f"-x = {line}\n+x = {line + 1}"}


RUN = {"name": "m", "module": "pkg/m.py", "seconds": 93.0, "annotation_mutants_skipped": 4,
       "reruns": ["a note"], "mutants": [mutant(3, "killed"), mutant(5, "survived"),
                                         mutant(7, "killed"), mutant(9, "error (exception)"),
                                         mutant(11, "killed")]}


def test_a_summary_counts_the_killed_and_keeps_every_other_mutant_whole() -> None:
    s = summary(RUN, "2026-11-26", "abc1234")
    assert s["killed"] == 3
    assert s["mutants"] == [mutant(5, "survived"), mutant(9, "error (exception)")]
    assert (s["date"], s["head"], s["reruns"], s["seconds"]) == ("2026-11-26", "abc1234",
                                                                 ["a note"], 93.0)
    assert summary(s, "2026-11-27", "def5678")["killed"] == 3  # a summary of a summary


def test_the_report_scores_a_summary_as_it_scores_the_whole_run(tmp_path: Path) -> None:
    whole, summed = tmp_path / "whole.md", tmp_path / "summed.md"
    equivalents = [{"module": "pkg/m.py", "operator": "core/X", "source": "x = 5", "why": "w"}]
    write_report([RUN], [dict(e) for e in equivalents], whole, 0.5)
    write_report([summary(RUN, "2026-11-26", "abc1234")], [dict(e) for e in equivalents],
                 summed, 0.5)
    row = next(line for line in summed.read_text().splitlines() if line.startswith("| m |"))
    assert row == ("| m | `pkg/m.py` | 4 | 3 | 1 (1 equivalent) | **75.0%** | 4 | 1.6 min | "
                   "2026-11-26 | abc1234 |")
    assert "| ? | ? |" in whole.read_text()  # a whole run has no date or head of its own
    assert "pkg/m.py:9" in summed.read_text()  # the unrunnable mutant is still listed


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_save_writes_the_summary_at_the_modules_commit_and_load_reads_it_back(
        tmp_path: Path) -> None:
    repo, ledger = tmp_path / "repo", tmp_path / "ledger"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "m.py").write_text("x = 3\n")
    (repo / "other.py").write_text("y = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    short = git(repo, "rev-parse", "--short", "HEAD")
    path = save(RUN, repo, ledger, ran="2026-11-26")
    assert path == ledger / "m.json"
    assert json.loads(path.read_text())["head"] == short
    (repo / "other.py").write_text("y = 2\n")  # another file's edit is not the module's
    assert head(repo, "pkg/m.py") == short
    (repo / "pkg" / "m.py").write_text("x = 4\n")
    assert head(repo, "pkg/m.py") == f"{short} + edits"
    assert head(repo, "pkg") == f"{short} + edits"
    git(repo, "checkout", "-q", "pkg/m.py")
    (repo / "pkg" / "new.py").write_text("")  # a new file in a package module is an edit too
    assert head(repo, "pkg") == f"{short} + edits"
    assert head(repo, "pkg/m.py") == short
    assert head(tmp_path / "ledger", "m.py") == "not a git checkout"
    found, missing = load(["gone", "m"], ledger)
    assert [r["name"] for r in found] == ["m"] and missing == ["gone"]
    assert found[0]["killed"] == 3 and found[0]["date"] == "2026-11-26"


def test_a_run_is_stale_once_its_module_changes_and_not_for_another_files_change(
        tmp_path: Path) -> None:
    from mutation.ledger import changed_since

    (tmp_path / "m.py").write_text("x = 3\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "one")
    ran = {"module": "m.py", "head": git(tmp_path, "rev-parse", "--short", "HEAD")}
    (tmp_path / "other.py").write_text("y = 2\n")
    git(tmp_path, "commit", "-qam", "two")
    assert not changed_since(ran, tmp_path)
    (tmp_path / "m.py").write_text("x = 4\n")  # uncommitted counts
    assert changed_since(ran, tmp_path)
    git(tmp_path, "checkout", "-q", "m.py")
    assert changed_since({**ran, "head": ran["head"] + " + edits"}, tmp_path)
    assert changed_since({**ran, "head": "not a git checkout"}, tmp_path)
    out = tmp_path / "report.md"
    write_report([summary(RUN, "2026-11-26", "abc1234")], [], out, 0.5, stale=["m"])
    text = out.read_text()
    assert "## Targets whose module changed since their run" in text
    assert 'TARGETS=\\"m\\"' not in text and 'TARGETS="m"' in text
    write_report([summary(RUN, "2026-11-26", "abc1234")], [], out, 0.5, stale=[])
    assert "changed since their run" not in out.read_text()


def test_save_keeps_the_head_the_run_noted_when_it_copied_the_module(tmp_path: Path) -> None:
    """A module committed while its run goes on: the run mutated the edits, not that commit."""
    path = save({**RUN, "head": "abc1234 + edits"}, tmp_path, tmp_path / "ledger",
                ran="2026-11-26")
    assert json.loads(path.read_text())["head"] == "abc1234 + edits"


def test_the_report_totals_every_target_and_names_the_modules_in_none(tmp_path: Path) -> None:
    other = {**summary(RUN, "2026-11-26", "abc1234"), "name": "n", "module": "pkg/n.py",
             "killed": 96, "mutants": [{**mutant(8, "survived"), "module": "pkg/n.py"}]}
    out = tmp_path / "report.md"
    equivalents = [{"module": "pkg/m.py", "operator": "core/X", "source": "x = 5", "why": "w"}]
    write_report([summary(RUN, "2026-11-26", "abc1234"), other], [dict(e) for e in equivalents],
                 out, 0.5, uncovered=["pkg/a.py", "pkg/b.py"], modules=9)
    text = out.read_text()
    # 3 + 96 killed of 101; of the 2 survivors (one per target) one is explained
    assert ("Overall, 2 targets: 99 of 101 mutants killed, **98.0%**; of the 2 survivors 1 are "
            "explained as equivalent, so 99.0% of the non-equivalent ones.") in text
    assert "2 of 9 modules: `pkg/a.py`, `pkg/b.py`." in text
    write_report([other], [], out, 0.5, uncovered=[], modules=9)
    assert "None: every product module of 9 is in a target." in out.read_text()
    write_report([other], [], out, 0.5)
    assert "in no target" not in out.read_text()


def test_a_module_has_code_unless_it_is_only_a_docstring_and_imports(tmp_path: Path) -> None:
    from mutation.run import has_code

    cases = {'"""Doc."""\nfrom a import b\nimport c\n': False, "": False,
             '"""Doc."""\nX = 1\n': True, "def f():\n    pass\n": True,
             "from a import b\n__all__ = ['b']\n": True}
    for n, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"m{n}.py"
        path.write_text(text)
        assert has_code(path) is expected, text
