"""String-literal mutants of the Python targets: the bugs cosmic-ray never makes (it has no
operator for string literals), of the kind issue 36's audit found slipping through: one name
swapped for another the module also uses (a label, a metric, a column, a key: ``"trial"`` where
``"experiment"`` was meant) and the last item dropped from a comma list (``"experiment, trial,
rank"`` losing ``rank``, a ``by (...)`` losing a label).

    python -m mutation.strings                # every target of mutation/targets.toml
    python -m mutation.strings compare runs   # some targets; the others keep their last results
    python -m mutation.strings --survivors gc # only the last run's survivors (and mutants it did
                                              # not have), against the tests as they are now
                                              # (the module must be unchanged)
    python -m mutation.strings --report       # rewrite the report from the kept results

Each target's module (targets.toml's ``module``) gets its own copy of the working tree
(.mutation/strings-NAME); every mutant is written there alone and the target's own tests run
against it (``pytest -x``), as mutation/run.py runs cosmic-ray's. Killed: a test failed or timed
out. Results are kept in mutation/string_results/NAME.json (committed) and summed up in
docs/string-mutation-report.md; a survivor that cannot change behaviour is explained in
mutation/string_equivalents.toml (module, the stripped source line, the literal and its mutant,
why). Docstrings, f-strings, type annotations, ``__all__`` and the ``__main__`` guard are not
mutated.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mutation.ledger import head
from mutation.run import annotation_spans_in, checked_tests, kill_tree

REPO = Path(__file__).resolve().parent.parent
STATE = REPO / ".mutation"
RESULTS = REPO / "mutation" / "string_results"
REPORT = REPO / "docs" / "string-mutation-report.md"
EQUIVALENTS = REPO / "mutation" / "string_equivalents.toml"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]*\Z")
_NAMES = r"[A-Za-z_][A-Za-z0-9_]*(?:, ?[A-Za-z_][A-Za-z0-9_]*)+"
# A comma list of names: the whole literal, or a PromQL grouping's labels (not prose).
LIST = re.compile(rf"\A(?P<names>{_NAMES})\Z|\b(?:by|without|on|ignoring|group_left|group_right) ?"
                  rf"\((?P<labels>{_NAMES})\)")


@dataclass(frozen=True)
class Mutant:
    """One literal rewritten: where, what it was, what it became."""

    path: str  # relative to the repository
    line: int
    col: int  # the literal's start and end, as ast gives them (UTF-8 byte offsets)
    end: int
    source: str  # the line, stripped, as the equivalents file names it
    original: str
    mutant: str
    kind: str  # "swap" or "drop"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _skipped(tree: ast.AST) -> set[int]:
    """ids of the constants not to mutate: docstrings, f-string parts, the __main__ guard."""
    skipped = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skipped |= {id(child) for child in ast.walk(node)}
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and node.left.id == "__name__":
            skipped |= {id(child) for child in ast.walk(node)}
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            skipped |= {id(child) for child in ast.walk(node.value)}  # star imports' list
    return skipped


def literals(text: str) -> Iterator[ast.Constant]:
    """The module's one-line str literals that may be mutated, in source order."""
    tree = ast.parse(text)
    skipped = _skipped(tree)
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and id(node) not in skipped
             and node.lineno == node.end_lineno]
    yield from sorted(found, key=lambda n: (n.lineno, n.col_offset))


def mutants(path: str, text: str) -> list[Mutant]:
    """Every literal that is a name: swapped for the next name (in sorted order) the module's
    literals hold; every literal holding a comma list of names: its last name dropped.

    >>> src = 'BY = "experiment, trial"\\nA = "rank"\\nB = "trial"\\n'
    >>> [(m.original, m.mutant, m.kind) for m in mutants("x.py", src)]
    [('experiment, trial', 'experiment', 'drop'), ('rank', 'trial', 'swap'), ('trial', 'rank', 'swap')]
    """
    lines = text.splitlines()
    spans = annotation_spans_in(text)
    nodes = [n for n in literals(text)
             if not any(a <= (n.lineno, n.col_offset) and (n.lineno, n.end_col_offset or 0) <= b
                        for a, b in spans)]
    names = sorted({n.value for n in nodes if NAME.match(n.value) and len(n.value) > 1})
    found = []
    for node in nodes:
        value, line = node.value, lines[node.lineno - 1]
        new, kind = None, ""
        if value in names and len(names) > 1:
            new, kind = names[(names.index(value) + 1) % len(names)], "swap"
        else:
            lists = list(LIST.finditer(value))
            if lists:
                group = "names" if lists[-1].group("names") else "labels"
                start, end = lists[-1].span(group)
                names_ = value[start:end]
                kept = names_[:names_.rindex(re.split(r", ?", names_)[-1])].rstrip(", ")
                new, kind = value[:start] + kept + value[end:], "drop"
        if new is not None and new != value:
            found.append(Mutant(path, node.lineno, node.col_offset, node.end_col_offset or 0,
                                line.strip(), value, new, kind))
    return found


def apply(text: str, m: Mutant) -> str:
    """``text`` with the mutant's literal rewritten (repr of the new value), the rest as is."""
    lines = text.splitlines(keepends=True)
    raw = lines[m.line - 1].encode()
    lines[m.line - 1] = (raw[:m.col] + repr(m.mutant).encode() + raw[m.end:]).decode()
    return "".join(lines)


def modules(target: dict[str, Any]) -> list[str]:
    root = REPO / target["module"]
    if root.is_dir():
        return sorted(p.relative_to(REPO).as_posix() for p in root.rglob("*.py"))
    return [target["module"]]


def _digest(paths: list[str]) -> str:
    return hashlib.sha256(b"".join((REPO / p).read_bytes() for p in paths)).hexdigest()[:16]


def _judge(work: Path, m: Mutant, command: list[str], timeout: float) -> str:
    text = (work / m.path).read_text()
    (work / m.path).write_text(apply(text, m))
    tests = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return "survived" if tests.wait(timeout=timeout) == 0 else "killed"
    except subprocess.TimeoutExpired:
        kill_tree(tests.pid)  # pytest and whatever it started: none runs on
        tests.wait()
        return "killed"
    finally:
        (work / m.path).write_text(text)


def run_target(target: dict[str, Any]) -> dict[str, Any]:
    name, started = target["name"], time.monotonic()
    work = STATE / f"strings-{name}"
    on = head(REPO, target["module"])
    command, timeout = checked_tests(target, work)
    results = []
    for path in modules(target):
        for m in mutants(path, (work / path).read_text()):
            status = _judge(work, m, command, timeout)
            results.append({**asdict(m), "status": status})
            print(f"  {name} {m.path}:{m.line} {m.original!r} -> {m.mutant!r}: {status}",
                  flush=True)
    return {"name": name, "module": target["module"], "head": on,
            "digest": _digest(modules(target)), "ran": datetime.date.today().isoformat(),
            "seconds": round(time.monotonic() - started, 1), "mutants": results}


def rerun_survivors(target: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """``last`` with its survivors run again against the tests as they are now, and the
    mutants the generator makes now that the last run did not have run for the first time;
    refused when the module changed since (its mutants may differ: run the target whole)."""
    name = target["name"]
    if last.get("digest") != _digest(modules(target)):
        raise SystemExit(f"{name}: the module changed since its last run; run it whole")
    work = STATE / f"strings-{name}"
    command, timeout = checked_tests(target, work)
    made = _made(target)
    before = {(m["path"], m["line"], m["col"], m["original"], m["mutant"]): m
              for m in last["mutants"]}
    kept = []
    for key, mutant in made.items():  # what is no longer made is left out
        m = before.get(key) or {**asdict(mutant), "status": "survived"}
        if m["status"] == "survived":
            m = {**m, "status": _judge(work, mutant, command, timeout)}
            print(f"  {name} {m['path']}:{m['line']} {m['original']!r} -> {m['mutant']!r}: "
                  f"{m['status']}", flush=True)
        kept.append(m)
    return {**last, "mutants": kept,
            "reruns": [*last.get("reruns", []),
                       f"{datetime.date.today().isoformat()}: survivors run again"]}


def explain(m: dict[str, Any], equivalents: list[dict[str, str]]) -> str | None:
    for e in equivalents:
        if (e["module"], e["source"], e["original"], e["mutant"]) == \
                (m["path"], m["source"], m["original"], m["mutant"]):
            return e["why"]
    return None


def write_report(results: list[dict[str, Any]], equivalents: list[dict[str, str]]) -> bool:
    """docs/string-mutation-report.md from the kept results; True when every survivor is
    explained."""
    rows, survivors, total, killed, explained = [], [], 0, 0, 0
    for r in results:
        alive = [m for m in r["mutants"] if m["status"] == "survived"]
        why = [explain(m, equivalents) for m in alive]
        n, k = len(r["mutants"]), len(r["mutants"]) - len(alive)
        total, killed = total + n, killed + k
        explained += sum(w is not None for w in why)
        score = f"{k / n:.1%}" if n else "-"
        rows.append(f"| {r['name']} | `{r['module']}` | {n} | {k} | {len(alive)} "
                    f"({sum(w is not None for w in why)} equivalent) | **{score}** | "
                    f"{r['seconds'] / 60:.1f} min | {r['ran']} | {r['head']} |")
        survivors += [f"- `{m['path']}:{m['line']}` {m['kind']} `{m['original']}` -> "
                      f"`{m['mutant']}` in `{m['source']}`: "
                      + (f"equivalent: {w}" if w else "**unexplained**")
                      for m, w in zip(alive, why, strict=True)]
    non_equivalent = total - explained
    lines = [
        "# String mutation report", "",
        ("Written by `make string-mutation` (mutation/strings.py) from every target's last run, "
        "kept in mutation/string_results/. Each mutant rewrites one string literal of a target's "
        "module, the kind of bug cosmic-ray never makes: a name swapped for the next name the "
        "module's literals hold (sorted), or the last name dropped from a comma list; it runs "
        "against the target's fast unit tests (mutation/targets.toml) and is killed when one "
        "fails. Survivors that cannot change behaviour are explained in "
        "mutation/string_equivalents.toml."), "",
        f"Overall, {len(results)} targets: {killed} of {total} mutants killed"
        + (f", **{killed / total:.1%}**; {killed} of {non_equivalent} non-equivalent ones, "
           f"**{killed / non_equivalent:.1%}**." if total and non_equivalent else "."), "",
        "| target | module | mutants | killed | survived | score | time | ran | head |",
        "|---|---|---|---|---|---|---|---|---|", *rows, "", "## Survivors", "",
        *(survivors or ["None."]), ""]
    REPORT.write_text("\n".join(lines))
    return explained == total - killed


def _made(target: dict[str, Any]) -> dict[tuple[str, int, int, str, str], Mutant]:
    """The mutants the generator makes of the target's module now, by their identity."""
    return {(m.path, m.line, m.col, m.original, m.mutant): m
            for path in modules(target) for m in mutants(path, (REPO / path).read_text())}


def _load_all(targets: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every kept result; where its module is unchanged, less the mutants the generator no
    longer makes (it learnt to leave something alone since the run)."""
    found = []
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text())
        target = targets.get(result["name"])
        if target is not None and result.get("digest") == _digest(modules(target)):
            made = _made(target)
            result["mutants"] = [m for m in result["mutants"] if (
                m["path"], m["line"], m["col"], m["original"], m["mutant"]) in made]
        found.append(result)
    return found


def main(argv: list[str]) -> int:
    config = tomllib.loads((REPO / "mutation" / "targets.toml").read_text())
    targets = {t["name"]: t for t in config["target"]}
    equivalents = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", []) \
        if EQUIVALENTS.exists() else []
    ok = True
    again = argv[:1] == ["--survivors"]
    argv = argv[1:] if again else argv
    if argv != ["--report"]:
        unknown = set(argv) - set(targets)
        if again and not argv:
            raise SystemExit("--survivors needs the targets to run again")
        if unknown:
            raise SystemExit(f"unknown targets {sorted(unknown)}; known: {sorted(targets)}")
        RESULTS.mkdir(exist_ok=True)
        for name in argv or list(targets):
            print(f"== {name}: {targets[name]['module']}", flush=True)
            kept = RESULTS / f"{name}.json"
            try:
                result = rerun_survivors(targets[name], json.loads(kept.read_text())) if again \
                    else run_target(targets[name])
            except SystemExit as err:  # one target's refusal leaves the others to run
                print(f"== {name}: not run: {err}", flush=True)
                ok = False
                continue
            (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            alive = sum(m["status"] == "survived" for m in result["mutants"])
            print(f"== {name}: {len(result['mutants'])} mutants, {alive} survived, "
                  f"{result['seconds'] / 60:.1f} min", flush=True)
    ok = write_report(_load_all(targets), equivalents) and ok
    print(f"report: {REPORT.relative_to(REPO)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
