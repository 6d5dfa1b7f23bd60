"""Mutation testing of the rendered Prometheus rules against their promtool cases
(``make rule-mutation``).

    python -m mutation.rules            # every rule, two mutants at a time (RULE_MUTATION_JOBS)
    python -m mutation.rules --report   # rewrite the report from the last run's results
    python -m mutation.rules --survivors          # rerun the last run's survivors only
    python -m mutation.rules TrainwatchRankStraggler  # rerun one rule's mutants
    RULE_MUTATION_REV=HEAD python -m mutation.rules  # the committed rules and cases

Each rule in prometheus/rules/*.yml is parsed (mutation/promql.py) and mutated one node at a
time (a node inside a fragment that the rule holds more than once, as rulegen writes one variable
into several places, in all its copies at once), plus its ``for:`` removed, halved and doubled. A mutant runs in a scratch copy
(.mutation/rules/) of the rule files with that one rule's text changed, against every cases file
in prometheus/tests (and those a test builds, GENERATED_CASES) that loads the mutated file,
keeping only the checks of the rules the mutant can reach (itself and the rules that read it);
it is killed when a file that passes unmutated fails. Writes docs/rule-mutation-report.md and
exits 1 when under 95% of the non-equivalent mutants are killed or a survivor is neither killed
nor explained in mutation/rule_equivalents.toml.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mutation import promql
from mutation.reruns import merge_rerun
from mutation.rule_report import write_report
from trial_instrumentation.durations import parse_duration

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "prometheus" / "rules"
CASES = REPO / "prometheus" / "tests"
STATE = REPO / ".mutation" / "rules"
RESULTS = STATE / "results.json"
EQUIVALENTS = Path(__file__).with_name("rule_equivalents.toml")
TIMEOUT_S = 180
# Cases files a test builds instead of keeping in prometheus/tests ("module:function"; the
# function writes the file into the folder it is given and returns its path): they judge the
# mutants too, their rule_files read as the snapshot's rules of the same name.
GENERATED_CASES = ("tests.test_cause_rules:_promtool_file",)


@dataclass
class RuleMutant:
    rule: str        # alert name, record name (with its labels where two share the name), or
                     # the shared fragment's name
    kind: str
    change: str      # `old` -> `new`, with the occurrence when the rule has it twice
    expr: str        # the mutated expression (or the original, for a for: mutant)
    files: dict[str, str] = field(repr=False)  # rule file name -> its mutated text
    reach: list[str] = field(default_factory=list)  # the rules whose results it may change
    outcome: str = ""
    detail: str = ""


def rule_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each rule's block in a rendered rule file, in file order."""
    starts = [m.start() for m in re.finditer(r"^  - (?:alert|record): ", text, re.MULTILINE)]
    ends = [m.start() for m in re.finditer(r"^(?:  - |- name: )", text, re.MULTILINE)]
    return [(s, min([e for e in ends if e > s], default=len(text))) for s in starts]


def render_expr(block: str, old: str, new: str) -> str:
    """``block`` with its expr ``old`` replaced by ``new`` in the same YAML style (a plain
    scalar stays one when it still reads back as ``new``)."""
    indented = "\n".join("      " + line for line in old.split("\n"))
    if f"    expr: |-\n{indented}\n" in block:
        fresh = "\n".join("      " + line for line in new.split("\n"))
        return block.replace(f"    expr: |-\n{indented}\n", f"    expr: |-\n{fresh}\n", 1)
    assert f"    expr: {old}\n" in block, block
    plain = f"    expr: {new}\n"
    if "\n" not in new and yaml.safe_load(plain.strip()) == {"expr": new}:
        return block.replace(f"    expr: {old}\n", plain, 1)
    fresh = "\n".join("      " + line for line in new.split("\n"))
    return block.replace(f"    expr: {old}\n", f"    expr: |-\n{fresh}\n", 1)


def rule_ids(rules: list[dict[str, Any]]) -> list[str]:
    names = Counter(r.get("alert") or r["record"] for r in rules)
    return [(r.get("alert") or r["record"]) + (
        "{" + ", ".join(f'{k}="{v}"' for k, v in r.get("labels", {}).items()) + "}"
        if names[r.get("alert") or r["record"]] > 1 else "") for r in rules]


def build_mutants(rules_dir: Path, rate_window: str, shared: str = "",
                  shared_name: str = "") -> list[RuleMutant]:
    """Every mutant of every rule in ``rules_dir``. A node inside ``shared`` (a fragment that
    one rulegen helper writes into several rules) is mutated once, in every rule at once, as
    a bug in that helper would be, under ``shared_name``."""
    found: list[tuple[str, str, dict[str, Any], str, int, int]] = []
    texts = {p.name: p.read_text() for p in sorted(rules_dir.glob("*.yml"))}
    for name, text in texts.items():
        rules = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
        spans = rule_spans(text)
        assert len(spans) == len(rules), name
        for rule_id, rule, (start, end) in zip(rule_ids(rules), rules, spans, strict=True):
            found.append((name, rule_id, rule, text, start, end))
    trees = promql.parse([f[2]["expr"] for f in found] + ([shared] if shared else []))
    out: list[RuleMutant] = []
    for (name, rule_id, rule, text, start, end), (tree, clean) in zip(found, trees, strict=False):
        assert clean, f"{rule_id}: the grammar rejects its expression"
        block, seen = text[start:end], Counter[str]()
        reach = readers(found, rule.get("alert") or rule["record"])
        at = rule["expr"].find(shared) if shared else -1
        inside = range(at, at + len(shared)) if at >= 0 else range(0)

        repeated = repeated_spans(rule["expr"], tree)

        def add(kind: str, change: str, expr: str, new_block: str,
                name: str = name, text: str = text, start: int = start, end: int = end,
                seen: Counter[str] = seen, rule_id: str = rule_id,
                reach: list[str] = reach) -> None:
            seen[change] += 1
            label = change if seen[change] == 1 else f"{change} (#{seen[change]})"
            out.append(RuleMutant(rule_id, kind, label, expr,
                                  {name: text[:start] + new_block + text[end:]}, reach))

        for m in promql.mutants(rule["expr"], rate_window, tree):
            if m.start in inside and m.start + len(m.old) - 1 in inside:
                continue
            mutated = everywhere(rule["expr"], m, repeated)
            if mutated is None:  # a later copy of a repeated fragment: mutated with the first
                seen[m.change] += 1
                continue
            add(m.kind, m.change, mutated, render_expr(block, rule["expr"], mutated))
        if "for" in rule:
            line = f"    for: {rule['for']}\n"
            add("for", f"`for: {rule['for']}` removed", rule["expr"], block.replace(line, "", 1))
            seconds = parse_duration(rule["for"])
            for new in (seconds / 2, seconds * 2):
                if new == int(new):
                    fresh = promql.format_duration(new)
                    add("for", f"`for: {rule['for']}` -> `for: {fresh}`", rule["expr"],
                        block.replace(line, f"    for: {fresh}\n", 1))
    if shared:
        users = [f for f in found if shared in f[2]["expr"]]
        seen = Counter[str]()
        for m in promql.mutants(shared, rate_window, trees[-1][0]):
            seen[m.change] += 1
            label = m.change if seen[m.change] == 1 else f"{m.change} (#{seen[m.change]})"
            changed = {n: t.replace(shared, m.text) for n, t in texts.items() if shared in t}
            out.append(RuleMutant(shared_name, m.kind, label, m.text, changed,
                                  [f[2]["alert"] for f in users if "alert" in f[2]]))
    return out


REPEATED_MIN_CHARS = 40


def repeated_spans(expr: str, tree: list[promql.Node]) -> list[tuple[int, int]]:
    """(start, end) of each syntax node of ``expr`` (of at least REPEATED_MIN_CHARS) whose
    text occurs more than once in it: a fragment that one rulegen variable or helper writes
    several times into a rule (causes.py's node figures, the MFU rule's GPU join)."""
    return sorted({(n.start, n.end) for n in tree if n.end - n.start >= REPEATED_MIN_CHARS
                   and expr.count(expr[n.start:n.end]) > 1})


def everywhere(expr: str, m: promql.Mutant, repeated: list[tuple[int, int]]) -> str | None:
    """``m``'s expression, or, where ``m`` rewrites a node inside a repeated fragment (the
    smallest holding it), ``expr`` with every copy of that fragment rewritten alike, as a bug
    in the code that writes it would be; None for a node inside a later copy (its mutant is
    the first copy's)."""
    end = m.start + len(m.old)
    holding = [(s, e) for s, e in repeated if s <= m.start and end <= e]
    if not holding:
        return m.text
    start, stop = min(holding, key=lambda span: span[1] - span[0])
    fragment = expr[start:stop]
    if expr.find(fragment) != start:
        return None
    offset = m.start - start
    return expr.replace(fragment, fragment[:offset] + m.new + fragment[offset + len(m.old):])


def _names(names: set[str]) -> re.Pattern[str]:
    return re.compile("|".join(rf"(?<![\w:]){re.escape(n)}(?![\w:])" for n in sorted(names)))


def readers(found: list[tuple[str, str, dict[str, Any], str, int, int]], name: str) -> list[str]:
    """``name`` and every rule that reads it, directly or through another recording: the only
    rules whose results a mutant of ``name`` can change."""
    reach = {name}
    while True:
        named = _names(reach)
        more = {r.get("alert") or r["record"] for _, _, r, _, _, _ in found
                if named.search(r["expr"])} - reach
        if not more:
            return sorted(reach)
        reach |= more


def shared_fragment(rules_dir: Path) -> tuple[str, str]:
    """The longest parenthesised fragment written verbatim into three or more rules, and its
    name: the staleness gate that rulegen's live_trials() writes into the trial alerts."""
    exprs = [r["expr"] for p in sorted(rules_dir.glob("*.yml"))
             for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]
    spans = {expr[n.start:n.end] for expr, (tree, _) in zip(exprs, promql.parse(exprs), strict=True)
             for n in tree if n.name == "ParenExpr" and n.end - n.start > 80}
    shared = [f for f in spans if sum(f in e for e in exprs) >= 3]
    return (max(shared, key=len), "live_trials() gate") if shared else ("", "")


@functools.lru_cache(maxsize=128)
def _load(text: str) -> Any:
    """``text`` parsed (libyaml), kept for the texts in use (the cases, the unmutated rule
    files): shared, never to be changed in place."""
    return yaml.load(text, Loader=_LOADER)


def _text(obj: Any) -> str:
    """Every string in ``obj`` (a parsed YAML document or part of one), a line each."""
    if isinstance(obj, dict):
        return "\n".join(_text(v) for v in obj.values())
    if isinstance(obj, list):
        return "\n".join(_text(v) for v in obj)
    return str(obj)


def _dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, width=10**6)


# libyaml where PyYAML was built with it (its wheels are); the pure-Python twins otherwise.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def cases_for(cases: dict[str, str], files: list[str], reach: list[str]
              ) -> list[tuple[str, dict[str, Any]]]:
    """(name, document) of each cases file (name -> text) that loads one of ``files``, with
    only the checks of the rules in ``reach`` (see :func:`only_needed`). A rule file's own
    cases file first, then the shortest (a mutant stops at the first file that kills it)."""
    chosen = []
    for name in sorted(cases, key=lambda n: (n not in files, len(cases[n]))):
        doc = _load(cases[name])
        if not any(f"../rules/{file}" in doc["rule_files"] for file in files):
            continue
        tests = list(filter(None, (_checks(t, reach) for t in doc["tests"])))
        if tests:
            chosen.append((name, {**doc, "tests": tests}))
    return chosen


def _checks(test: dict[str, Any], reach: list[str]) -> dict[str, Any] | None:
    named = _names(set(reach))
    checks = {"alert_rule_test": [c for c in test.get("alert_rule_test", [])
                                  if c["alertname"] in reach],
              "promql_expr_test": [c for c in test.get("promql_expr_test", [])
                                   if named.search(_text(c))]}
    if not any(checks.values()):
        return None
    return {**test, **{key: value for key, value in checks.items() if value or key in test}}


def only_needed(rule_texts: dict[str, str], reach: list[str],
                cases: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The rule files with only the rules that the checks of ``cases`` (those of the rules in
    ``reach``, see :func:`cases_for`) can see: the alerts in ``reach``, and the recording rules
    in ``reach``, named by a check, or read (by expression or annotation query) by one kept.
    No rule reads an alert, and the others' evaluation is much of promtool's time."""
    docs = {name: _load(text) for name, text in rule_texts.items()}
    every = [r for doc in docs.values() for g in doc["groups"] for r in g["rules"]]
    records = _names({r["record"] for r in every if "record" in r})
    reads = [(r.get("alert") or r["record"], set(records.findall(_text(r))))
             for r in every]
    wanted = set(reach) | set(records.findall(_text([d for _, d in cases])))
    while True:
        more = {name for rule, read in reads if rule in wanted for name in read} - wanted
        if not more:
            break
        wanted |= more
    return {name: _dump({**doc, "groups": [
        {**g, "rules": [r for r in g["rules"] if (r.get("alert") or r["record"]) in wanted]}
        for g in doc["groups"]]}) for name, doc in docs.items()}


def generated_cases(folder: Path, refs: tuple[str, ...] = GENERATED_CASES) -> dict[str, str]:
    """name -> text of each of ``refs``' cases files (see GENERATED_CASES), named after its
    module, with every rule file it loads as ``../rules/<name>``."""
    out = {}
    for ref in refs:
        module, _, function = ref.partition(":")
        try:
            build = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as e:
            raise SystemExit(f"mutation/rules.py GENERATED_CASES: {ref}: {e}") from None
        (folder / module).mkdir(parents=True, exist_ok=True)
        doc = yaml.safe_load(Path(build(folder / module)).read_text())
        doc["rule_files"] = [f"../rules/{Path(f).name}" for f in doc["rule_files"]]
        out[f"{module.rpartition('.')[2]}.yml"] = yaml.safe_dump(doc, sort_keys=False, width=1000)
    return out


def promtool_test(work: Path, rule_texts: dict[str, str], cases: list[tuple[str, dict[str, Any]]],
                  stop_at_first: bool) -> list[tuple[str, int, str]]:
    """Run each cases file against ``rule_texts`` in ``work``: (file, exit status, output)."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "rules").mkdir(parents=True)
    (work / "tests").mkdir()
    for name, text in rule_texts.items():
        (work / "rules" / name).write_text(text)
    runs = []
    for name, doc in cases:
        (work / "tests" / name).write_text(_dump(doc))
        try:
            proc = subprocess.run(["promtool", "test", "rules", name], cwd=work / "tests",
                                  capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
            runs.append((name, proc.returncode, proc.stdout + proc.stderr))
        except subprocess.TimeoutExpired:
            runs.append((name, -1, f"timed out after {TIMEOUT_S}s"))
        if stop_at_first and runs[-1][1]:
            break
    return runs


def judge(mutant: RuleMutant, runs: list[tuple[str, int, str]]) -> None:
    failed = [(name, rc, out) for name, rc, out in runs if rc]
    if not failed:
        mutant.outcome, mutant.detail = "survived", ", ".join(name for name, _, _ in runs)
        return
    name, rc, out = failed[0]
    if rc == -1:
        mutant.outcome, mutant.detail = "killed", f"{name}: timed out"
    elif re.search(r"could not (?:parse|load)|Unable to load|parse error|error loading", out,
                   re.IGNORECASE) and "exp:" not in out:
        mutant.outcome, mutant.detail = "invalid", out.strip().splitlines()[-1][:200]
    else:
        case = re.search(r"name: (.*?),?\n", out)
        mutant.outcome = "killed"
        mutant.detail = f"{name}: {case.group(1) if case else 'failed'}"


def main(argv: list[str]) -> int:
    if argv[:1] != ["--report"]:
        run_all(int(os.environ.get("RULE_MUTATION_JOBS", "2")), argv)
    results = json.loads(RESULTS.read_text())
    equivalents = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", [])
    return write_report(results, equivalents)


def chosen(mutants: list[RuleMutant], argv: list[str]) -> tuple[list[int], dict[str, Any]]:
    """Indexes of the mutants to run, and the last results they are merged into: all (and no
    last results) without arguments; with --survivors the last run's survivors; else the
    mutants of the rules named."""
    if not argv:
        return list(range(len(mutants))), {}
    last = json.loads(RESULTS.read_text())
    if argv == ["--survivors"]:
        wanted = {(m["rule"], m["change"]) for m in last["mutants"] if m["outcome"] == "survived"}
        return [i for i, m in enumerate(mutants) if (m.rule, m.change) in wanted], last
    return [i for i, m in enumerate(mutants) if m.rule in argv], last


def snapshot(rev: str) -> Path:
    """The rule files and cases, copied once into .mutation/rules/source/{rules,tests} (so an
    edit made during the run changes nothing): from the working tree, or with ``rev`` (env
    RULE_MUTATION_REV=HEAD) from that commit, leaving others' uncommitted edits out."""
    source = STATE / "source"
    shutil.rmtree(source, ignore_errors=True)
    for folder in (RULES, CASES):
        (source / folder.name).mkdir(parents=True)
        if not rev:
            for path in folder.glob("*.yml"):
                shutil.copy2(path, source / folder.name / path.name)
            continue
        where = folder.relative_to(REPO).as_posix()
        names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{where}"], cwd=REPO,
                               check=True, capture_output=True, text=True).stdout.split()
        for name in filter(lambda n: n.endswith(".yml"), names):
            (source / folder.name / name).write_bytes(subprocess.run(
                ["git", "show", f"{rev}:{where}/{name}"], cwd=REPO, check=True,
                capture_output=True).stdout)
    return source / RULES.name


def run_all(jobs: int, argv: list[str]) -> None:
    began = time.monotonic()
    rules_dir = snapshot(os.environ.get("RULE_MUTATION_REV", ""))
    rule_texts = {p.name: p.read_text() for p in sorted(rules_dir.glob("*.yml"))}
    cases = {p.name: p.read_text() for p in sorted((rules_dir.parent / "tests").glob("*.yml"))}
    cases.update(generated_cases(STATE / "generated"))
    rate_window = yaml.safe_load((REPO / "prometheus" / "thresholds.yaml").read_text())["rate_window"]
    mutants = build_mutants(rules_dir, rate_window, *shared_fragment(rules_dir))
    broken: set[str] = set()
    for name, rc, out in promtool_test(STATE / "baseline", rule_texts,
                                       [(n, yaml.safe_load(t)) for n, t in cases.items()],
                                       False):
        if rc:
            broken.add(name)
            print(f"{name} fails unmutated: its cases judge no mutant\n{out[-2000:]}",
                  file=sys.stderr)

    print(f"{len(mutants)} mutants, {jobs} at a time", file=sys.stderr)

    def one(index: int) -> None:
        m = mutants[index]
        chosen = [(n, d) for n, d in cases_for(cases, list(m.files), m.reach)
                  if n not in broken]
        if not chosen:
            m.outcome, m.detail = "unjudged", "no cases file loads it and passes unmutated"
        else:
            texts = {**rule_texts, **m.files}
            judge(m, promtool_test(STATE / f"work-{index}",
                                   only_needed(texts, m.reach, chosen), chosen, True))
            shutil.rmtree(STATE / f"work-{index}", ignore_errors=True)
        print(f"[{index + 1}/{len(mutants)}] {m.outcome:8} {m.rule}: {m.change}", file=sys.stderr)

    indexes, last = chosen(mutants, argv)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, indexes))
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    fresh = {(m.rule, m.change): {**{k: v for k, v in asdict(m).items() if k != "files"},
                                  "file": " ".join(m.files)}
             for m in (mutants[i] for i in indexes)}
    if last:  # a partial run: its mutants replace theirs in the last full run (all of a rule
        # rerun by name: a rule edited since has other mutants)
        results = merge_rerun(last, fresh, "rule", f"{now}: {len(indexes)} mutants "
                              f"({' '.join(argv)}) in {round(time.monotonic() - began)} s",
                              dropped=argv)
    else:
        results = {"seconds": round(time.monotonic() - began), "jobs": jobs, "finished": now,
                   "broken_cases": sorted(broken), "mutants": list(fresh.values())}
    STATE.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
