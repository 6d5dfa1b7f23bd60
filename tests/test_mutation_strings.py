"""mutation/strings.py: which string literals become mutants, what each becomes, how it is
written back, and the report's counts."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from mutation import strings
from mutation.strings import Mutant, apply, explain, mutants

SOURCE = '''"""Module docstring: "rank", "trial"."""
from __future__ import annotations

__all__ = ["BY", "LABEL", "f"]

BY = "experiment, trial, rank"
LABEL = "trial"


def f(x: "Frame") -> str:
    """Docstring of f."""
    return f"{x} trial" + "rank"


if __name__ == "__main__":
    f("ignored")
'''


def test_names_are_swapped_for_the_next_name_and_lists_lose_their_last_name() -> None:
    found = [(m.line, m.original, m.mutant, m.kind) for m in mutants("m.py", SOURCE)]
    assert found == [
        (6, "experiment, trial, rank", "experiment, trial", "drop"),
        (7, "trial", "ignored", "swap"),  # names sorted: ignored, rank, trial (wraps around)
        (12, "rank", "trial", "swap"),
        (16, "ignored", "rank", "swap"),
    ]


def test_docstrings_fstrings_annotations_and_the_main_guard_are_left_alone() -> None:
    originals = {m.source for m in mutants("m.py", SOURCE)}
    assert not any("__main__" in s or '"""' in s or "Frame" in s or "__all__" in s
                   for s in originals)
    assert all(m.original != "Frame" and m.original != "__main__" for m in mutants("m.py", SOURCE))


def test_a_module_with_one_name_swaps_nothing() -> None:
    assert mutants("m.py", 'A = "only"\nB = "only"\n') == []


def test_a_list_inside_a_longer_string_drops_only_its_last_name() -> None:
    (m,) = mutants("m.py", 'Q = "sum by (experiment, trial) (x)"\n')
    assert (m.mutant, m.kind) == ("sum by (experiment) (x)", "drop")
    (m,) = mutants("m.py", 'Q = "a,b,c"\n')
    assert m.mutant == "a,b"
    assert mutants("m.py", 'H = "what it read (files, sockets, caches)"\n') == []  # prose
    (m,) = mutants("m.py", 'Q = "max without (gpu, uuid) (x) / on (a, b) y"\n')
    assert m.mutant == "max without (gpu, uuid) (x) / on (a) y"  # the last list only


def test_apply_rewrites_the_literal_at_its_byte_offsets_and_nothing_else() -> None:
    text = 'X = {"é": "trial"}  # "trial" kept\nY = "rank"\n'
    found = {m.original: m for m in mutants("m.py", text)}
    out = apply(text, found["trial"])
    assert out == 'X = {"é": \'rank\'}  # "trial" kept\nY = "rank"\n'
    assert ast.literal_eval(out.splitlines()[0][4:].split("  #")[0]) == {"é": "rank"}


def test_explain_matches_module_line_literal_and_mutant_all_four() -> None:
    m = {"path": "m.py", "source": 'LABEL = "trial"', "original": "trial", "mutant": "rank"}
    entry = {"module": "m.py", "source": 'LABEL = "trial"', "original": "trial",
             "mutant": "rank", "why": "because"}
    assert explain(m, [entry]) == "because"
    for key, other in (("module", "n.py"), ("source", "x"), ("original", "t"), ("mutant", "r")):
        assert explain(m, [{**entry, key: other}]) is None


def result(name: str, statuses: list[str]) -> dict[str, Any]:
    ms = [{"path": "m.py", "line": i + 1, "col": 0, "end": 1, "source": f"A{i} = 'x{i}'",
           "original": f"x{i}", "mutant": f"y{i}", "kind": "swap", "status": s}
          for i, s in enumerate(statuses)]
    return {"name": name, "module": "m.py", "head": "abc1234", "ran": "2026-11-26",
            "seconds": 90.0, "mutants": ms}


def test_the_report_counts_and_passes_only_when_every_survivor_is_explained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strings, "REPORT", tmp_path / "r.md")
    runs = [result("a", ["killed", "survived", "killed"]), result("b", ["killed"] * 3)]
    assert not strings.write_report(runs, [])
    text = (tmp_path / "r.md").read_text()
    assert "2 targets: 5 of 6 mutants killed, **83.3%**" in text
    assert "| a | `m.py` | 3 | 2 | 1 (0 equivalent) | **66.7%** | 1.5 min |" in text
    assert "| b | `m.py` | 3 | 3 | 0 (0 equivalent) | **100.0%** |" in text
    assert "`m.py:2` swap `x1` -> `y1` in `A1 = 'x1'`: **unexplained**" in text
    why = {"module": "m.py", "source": "A1 = 'x1'", "original": "x1", "mutant": "y1",
           "why": "never read"}
    assert strings.write_report(runs, [why])
    text = (tmp_path / "r.md").read_text()
    assert "equivalent: never read" in text and "unexplained" not in text
    assert "5 of 5 non-equivalent ones, **100.0%**" in text


def test_every_mutant_is_a_real_change_of_one_literal() -> None:
    for path in ("trainwatch/gc.py", "trainwatch/diagnose/runs.py"):
        text = (strings.REPO / path).read_text()
        for m in mutants(path, text):
            assert isinstance(m, Mutant) and m.mutant != m.original
            after = apply(text, m)
            changed = [(a, b) for a, b in zip(text.splitlines(), after.splitlines(), strict=True)
                       if a != b]
            assert len(changed) == 1 and changed[0][0].strip() == m.source
            ast.parse(after)


def test_survivors_run_again_keep_the_killed_drop_the_unmade_and_run_the_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = "trainwatch/gc.py"
    made = mutants(path, (strings.REPO / path).read_text())
    target = {"name": "gc", "module": path, "tests": []}
    gone = {**result("gc", ["survived"])["mutants"][0], "path": path}  # not a mutant of gc.py
    last = {"name": "gc", "digest": strings._digest([path]), "reruns": [],
            "mutants": [{**vars(made[0]), "status": "survived"},
                        {**vars(made[1]), "status": "killed"},
                        {**vars(made[2]), "status": "survived"}, gone]}
    judged: list[Mutant] = []
    monkeypatch.setattr(strings, "checked_tests", lambda t, work: (["pytest"], 20.0))

    def judge(work: Path, m: Mutant, command: list[str], timeout: float) -> str:
        judged.append(m)
        return "killed" if m in (made[0], made[4]) else "survived"

    monkeypatch.setattr(strings, "_judge", judge)
    again = strings.rerun_survivors(target, last)
    # The survivors and the mutants the last run lacked; the killed one not again.
    assert judged == [made[0], *made[2:]]
    assert [m["status"] for m in again["mutants"][:5]] == [
        "killed", "killed", "survived", "survived", "killed"]
    assert len(again["mutants"]) == len(made) and gone not in again["mutants"]
    assert len(again["reruns"]) == 1
    with pytest.raises(SystemExit, match="changed since its last run"):
        strings.rerun_survivors(target, {**last, "digest": "0" * 16})


def test_kept_results_lose_the_mutants_no_longer_made_only_while_the_module_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = "trainwatch/gc.py"
    made = mutants(path, (strings.REPO / path).read_text())
    gone = {**result("gc", ["survived"])["mutants"][0], "path": path}
    kept = {**vars(made[0]), "status": "killed"}
    monkeypatch.setattr(strings, "RESULTS", tmp_path)
    targets = {"gc": {"name": "gc", "module": path, "tests": []}}
    for digest, expected in ((strings._digest([path]), [kept]), ("0" * 16, [kept, gone])):
        (tmp_path / "gc.json").write_text(json.dumps(
            {"name": "gc", "digest": digest, "mutants": [kept, gone]}))
        assert strings._load_all(targets)[0]["mutants"] == expected
