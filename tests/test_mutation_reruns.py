"""A partial mutation run merged into the last full run's results (mutation/reruns.py), as
`python -m mutation.rules RULE...` and `python -m mutation.chart FILE...` do."""

from __future__ import annotations

from mutation.reruns import merge_rerun


def test_a_rerun_replaces_its_mutants_keeps_the_others_and_adds_the_new() -> None:
    last = {"mutants": [{"rule": "A", "change": "x", "outcome": "survived"},
                        {"rule": "A", "change": "y", "outcome": "killed"},
                        {"rule": "B", "change": "x", "outcome": "survived"}],
            "reruns": ["earlier"]}
    fresh = {("A", "x"): {"rule": "A", "change": "x", "outcome": "killed"},
             ("C", "z"): {"rule": "C", "change": "z", "outcome": "killed"}}
    merged = merge_rerun(last, fresh, "rule", "now")
    assert [(m["rule"], m["change"], m["outcome"]) for m in merged["mutants"]] == [
        ("A", "x", "killed"), ("A", "y", "killed"), ("B", "x", "survived"), ("C", "z", "killed")]
    assert merged["reruns"] == ["earlier", "now"]


def test_a_rule_rerun_by_name_drops_its_old_mutants() -> None:
    last = {"mutants": [{"file": "a", "change": "old"}, {"file": "b", "change": "x"}]}
    fresh = {("a", "new"): {"file": "a", "change": "new"}}
    merged = merge_rerun(last, fresh, "file", "n", dropped=["a"])
    assert merged["mutants"] == [{"file": "b", "change": "x"}, {"file": "a", "change": "new"}]
    assert merged["reruns"] == ["n"]
