"""The rule mutator of `make rule-mutation` (mutation/promql.py, mutation/rules.py): the rewrites
it makes, byte for byte, and that the promtool cases kill a known-bad mutant of a real alert."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mutation import promql, rules


@pytest.fixture(autouse=True)
def _parser() -> None:
    if not (promql.NODE_MODULES / "@prometheus-io" / "lezer-promql").is_dir():
        pytest.fail(f"{promql.NODE_MODULES}: no lezer-promql: run `make promql-tools` "
                    "(make test does it)")


def rewrites(expr: str, kind: str) -> list[str]:
    found = [m for m in promql.mutants(expr, rate_window="5m") if m.kind == kind]
    for m in found:  # one node rewritten, every other byte kept
        assert m.text[:m.start] == expr[:m.start]
        assert m.text[m.start + len(m.new):] == expr[m.start + len(m.old):]
    return [m.text for m in found]


def test_comparisons_are_loosened_and_reversed_and_thresholds_move_one_step() -> None:
    expr = 'share{phase="x"}  >  0.95\n'
    assert rewrites(expr, "comparison") == ['share{phase="x"}  >=  0.95\n',
                                            'share{phase="x"}  <  0.95\n']
    assert rewrites(expr, "number") == ['share{phase="x"}  >  0.94\n',
                                        'share{phase="x"}  >  0.96\n']
    assert rewrites("a == 0", "comparison") == ["a != 0"]
    assert promql.number_steps("300") == ["200", "400"]
    assert promql.number_steps("0") == ["-1", "1"]


def test_ranges_and_offsets_go_to_the_rate_window_or_half_of_it() -> None:
    assert rewrites("rate(x[1h] offset 5m)", "range") == ["rate(x[5m] offset 5m)",
                                                           "rate(x[2m30s] offset 5m)"]
    assert rewrites("rate(x[1h] offset 5m)", "offset") == ["rate(x[1h] offset 2m30s)"]


def test_labels_are_dropped_from_and_added_to_groupings() -> None:
    expr = "a / on (trial, rank) group_left max by (instance) (b)"
    assert rewrites(expr, "label") == [
        "a / on (rank) group_left max by (instance) (b)",
        "a / on (trial) group_left max by (instance) (b)",
        "a / on (trial, rank, instance) group_left max by (instance) (b)",
        # group_left never names a label of its on (): promtool rejects that
        "a / on (trial, rank) group_left (instance) max by (instance) (b)",
        "a / on (trial, rank) group_left max by () (b)",
        "a / on (trial, rank) group_left max by (instance, trial) (b)",
    ]


def test_set_operands_are_removed_and_aggregations_swapped() -> None:
    expr = "sum(a) > 1 and on (r) b unless c"
    assert rewrites(expr, "operand") == ["sum(a) > 1 and on (r) b", "c",
                                         "sum(a) > 1 unless c", "b unless c"]
    assert rewrites(expr, "aggregation") == ["avg(a) > 1 and on (r) b unless c"]


def test_a_mutant_changes_only_its_rules_text_in_the_file() -> None:
    gate, name = rules.shared_fragment(rules.RULES)
    assert gate.startswith("((max by (experiment, trial, rank) (time() - push_time_seconds")
    mutants = rules.build_mutants(rules.RULES, "5m", gate, name)
    original = (rules.RULES / "trial.yml").read_text()
    [m] = [m for m in mutants if m.rule == "TrainwatchDataloaderBound" and m.change == "`>` -> `>=`"]
    assert m.files == {"trial.yml": original.replace('dataloader_next"} > 0.3\n',
                                                     'dataloader_next"} >= 0.3\n')}
    doc = yaml.safe_load(m.files["trial.yml"])["groups"][0]["rules"][0]
    assert doc["expr"] == m.expr and doc["alert"] == m.rule and m.reach == [m.rule]
    assert {x.change for x in mutants if x.rule == "TrainwatchDataloaderBound" and x.kind == "for"} \
        == {"`for: 2m` removed", "`for: 2m` -> `for: 1m`", "`for: 2m` -> `for: 4m`"}
    # The staleness gate rulegen's live_trials() writes is mutated once, in every alert it gates.
    [bypass] = [x for x in mutants if x.rule == name and x.change == "`<` -> `>`"]
    # recording.yml: the GPU-seconds held and busy count live ranks only (rulegen/usage.py).
    assert sorted(bypass.files) == ["gpu.yml", "host.yml", "recording.yml", "trial.yml"]
    assert "TrainwatchDataloaderBound" in bypass.reach and "TrainwatchTrialStale" not in bypass.reach
    assert bypass.files["trial.yml"] == original.replace(gate, gate.replace(" < 300 ", " > 300 "))
    assert not [x for x in mutants if x.rule == "TrainwatchDataloaderBound" and "< 300" in x.change]


def test_the_cases_kill_a_known_bad_mutant_of_a_real_alert(tmp_path: Path) -> None:
    # A halved for: fires a minute early; trial.yml checks the alert is silent at 2m.
    texts = {p.name: p.read_text() for p in sorted(rules.RULES.glob("*.yml"))}
    cases = rules.cases_for({"trial.yml": (rules.CASES / "trial.yml").read_text()}, ["trial.yml"],
                            ["TrainwatchDataloaderBound"])
    [bad] = [m for m in rules.build_mutants(rules.RULES, "5m")
             if m.rule == "TrainwatchDataloaderBound" and m.change == "`for: 2m` -> `for: 1m`"]
    assert [rc for _, rc, _ in rules.promtool_test(tmp_path / "clean", texts, cases, False)] == [0]
    runs = rules.promtool_test(tmp_path / "bad", {**texts, **bad.files}, cases, False)
    rules.judge(bad, runs)
    assert bad.outcome == "killed", runs
    assert "DataloaderBound" in bad.detail


def _built_cases(folder: Path) -> Path:
    path = folder / "built.yml"
    check = {"expr": 'ALERTS{alertname="TrainwatchTrialStale"}', "eval_time": "1m",
             "exp_samples": []}
    path.write_text(yaml.safe_dump({"rule_files": [str(rules.RULES / "trial.yml")],
                                    "tests": [{"name": "x", "promql_expr_test": [check]}]}))
    return path


def test_a_cases_file_a_test_builds_judges_mutants_with_the_snapshots_rules(
        tmp_path: Path) -> None:
    built = rules.generated_cases(tmp_path, ("tests.test_rule_mutation:_built_cases",))
    assert list(built) == ["test_rule_mutation.yml"]
    doc = yaml.safe_load(built["test_rule_mutation.yml"])
    assert doc["rule_files"] == ["../rules/trial.yml"]
    # It judges the mutants of the rule files it loads, as a file of prometheus/tests would.
    assert [n for n, _ in rules.cases_for(built, ["trial.yml"], ["TrainwatchTrialStale"])] == [
        "test_rule_mutation.yml"]
    assert rules.cases_for(built, ["recording.yml"], ["TrainwatchTrialStale"]) == []
    with pytest.raises(SystemExit, match="GENERATED_CASES: tests.test_rule_mutation:gone"):
        rules.generated_cases(tmp_path, ("tests.test_rule_mutation:gone",))


def test_a_fragment_written_twice_into_a_rule_is_mutated_once_in_both_copies() -> None:
    part = 'sum by (a) (rate(trainwatch_x_seconds_total{job="j"}[5m]))'
    expr = f"{part} > 1 and on (a) {part} < 5"
    [(tree, _)] = promql.parse([expr])
    spans = rules.repeated_spans(expr, tree)
    found = [(m, rules.everywhere(expr, m, spans)) for m in promql.mutants(expr, "5m", tree)]
    second = expr.rindex(part)
    later = [t for m, t in found if m.start >= second and m.start + len(m.old) <= len(expr) - 4]
    first = [t for m, t in found if m.start + len(m.old) <= len(part)]
    # A node of the first copy is rewritten in both; the second copy's are not mutants again.
    assert later == [None] * len(first) and len(first) > 3
    for text in first:
        assert text is not None
        left, right = text.removesuffix(" < 5").split(" > 1 and on (a) ")
        assert left == right != part
    assert expr.replace("[5m]", "[2m30s]") in first
    # A node outside the fragment is rewritten once.
    assert f"{part} >= 1 and on (a) {part} < 5" in [t for _, t in found]


def test_a_mutant_runs_with_only_the_rules_its_checks_can_see() -> None:
    group = {"name": "g", "rules": [
        {"record": "a", "expr": "sum(x)"}, {"record": "b", "expr": "a * 2"},
        {"record": "c", "expr": "sum(y)"}, {"record": "d", "expr": "sum(z)"},
        {"alert": "X", "expr": "b > 1", "annotations": {"v": "{{ with query `a` }}{{ end }}"}},
        {"alert": "Y", "expr": "d > 1"}]}
    cases = [("t.yml", {"tests": [{"promql_expr_test": [{"expr": "b / c"}]}]})]
    kept = rules.only_needed({"r.yml": yaml.safe_dump({"groups": [group]})}, ["b", "X"], cases)
    [left] = yaml.safe_load(kept["r.yml"])["groups"]
    assert [r.get("record") or r["alert"] for r in left["rules"]] == ["a", "b", "c", "X"]
