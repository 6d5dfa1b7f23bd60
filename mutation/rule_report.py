"""docs/rule-mutation-report.md from the last ``make rule-mutation`` run (see rules.py)."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parent.parent / "docs" / "rule-mutation-report.md"
TARGET = 0.95
UNEXPLAINED = "**NOT EXPLAINED**: add a promtool case that kills it, or an [[equivalent]] entry"


def explain(mutant: dict[str, Any], equivalents: list[dict[str, str]]) -> str | None:
    for entry in equivalents:
        if entry["rule"] == mutant["rule"] and entry["change"] == mutant["change"]:
            entry["used"] = "yes"
            return entry["why"]
    return None


def write_report(results: dict[str, Any], equivalents: list[dict[str, str]],
                 path: Path = REPORT) -> int:
    """Write the report; 0 when at least 95% of the non-equivalent mutants are killed and
    every survivor is explained, else 1."""
    rows: dict[str, dict[str, Counter[str]]] = defaultdict(dict)
    survivors, invalid = [], []
    for m in results["mutants"]:
        if m["outcome"] == "survived":
            why = explain(m, equivalents)
            m["outcome"] = "equivalent" if why else "survived"
            survivors.append((m, why))
        elif m["outcome"] in ("invalid", "unjudged"):
            invalid.append(m)
        rows[m["file"]].setdefault(m["rule"], Counter())[m["outcome"]] += 1
    total = Counter(m["outcome"] for m in results["mutants"])
    judged = total["killed"] + total["survived"]
    score = total["killed"] / judged if judged else 0.0
    lines = [
        "# Rule mutation report",
        "",
        "Written by `make rule-mutation` (mutation/rules.py): every alert and recording rule of",
        "prometheus/rules, parsed with Prometheus's own PromQL grammar (@prometheus-io/lezer-promql),",
        "mutated one syntax node at a time (comparison flipped, loosened or reversed; a number",
        "moved one step; a range or offset set to the rate window or half of it; a label dropped",
        "from or added to by/without/on/ignoring/group_left; an and/or/unless operand removed, which",
        "removes the trials' staleness gates; an aggregation swapped) and its `for:` removed,",
        "halved or doubled. A mutant is killed when `promtool test rules` fails on a cases file",
        "of prometheus/tests that passes unmutated.",
        "",
        (f"Last run: {results['finished']}, {len(results['mutants'])} mutants, "
         f"{results['jobs']} at a time, {results['seconds'] // 60} min "
         f"{results['seconds'] % 60} s."),
        (f"**{total['killed']} killed, {total['survived']} survived, {total['equivalent']} "
         f"equivalent, {total['invalid']} invalid, {total['unjudged']} unjudged: {score:.1%} "
         f"of the non-equivalent mutants killed** (target {TARGET:.0%})."),
    ]
    for rerun in results.get("reruns", []):
        lines.append(f"Rerun since (after new cases), merged into it: {rerun}.")
    if results["broken_cases"]:
        lines.append(f"Cases files failing unmutated (judged no mutant): "
                     f"{', '.join(results['broken_cases'])}.")
    lines += ["", "| rule file | rule | mutants | killed | survived | equivalent | invalid |",
              "|---|---|---|---|---|---|---|"]
    for file, rules in sorted(rows.items()):
        for rule, c in rules.items():
            lines.append(f"| {file} | {rule} | {sum(c.values())} | {c['killed']} | "
                         f"{c['survived']} | {c['equivalent']} | {c['invalid']} |")
    lines += ["", "## Survivors", "",
              ("Each is killed by a promtool case or equivalent, with why "
               "(mutation/rule_equivalents.toml)."), ""]
    for m, why in survivors:
        lines.append(f"- {m['rule']} ({m['kind']}) {m['change']}: {why or UNEXPLAINED}")
    if invalid:
        lines += ["", "## Invalid mutants (promtool rejects the rule) and unjudged ones", ""]
        lines += [f"- {m['rule']} {m['change']}: {m['detail']}" for m in invalid]
    stale = [e for e in equivalents if "used" not in e]
    if stale:
        lines += ["", "## Equivalent entries that matched no survivor", ""]
        lines += [f"- {e['rule']} {e['change']}" for e in stale]
    path.write_text("\n".join(lines) + "\n")
    unexplained = [m for m, why in survivors if not why]
    print(f"{path.name}: {total['killed']}/{judged} killed ({score:.1%}), "
          f"{len(unexplained)} unexplained survivors", file=sys.stderr)
    return 0 if score >= TARGET and not unexplained else 1
