"""Mutation testing of the Helm chart's templates and the Grafana dashboard builders
(``make chart-mutation``, issue 36).

    python -m mutation.chart              # every chosen mutant, two at a time (CHART_MUTATION_JOBS)
    python -m mutation.chart --report     # rewrite the report from the last run's results
    python -m mutation.chart --survivors  # rerun the last run's survivors only
    python -m mutation.chart FILE...      # rerun the mutants of some files (as the report names them)
    CHART_MUTATION_REV=HEAD python -m mutation.chart   # the committed tree (others' edits left out)

Chart mutants are textual, at the places that matter in helm/trainwatch/templates/* and the
values.yaml defaults they read: an integer (a port, a count) moved one step or set to another
port the chart uses; a quoted or bare label, selector or job value altered; an ``{{ if }}``
condition negated; a ``- name:`` list entry (an env var, a port, a container, a volume) removed;
a selector label dropped; a values.yaml switch flipped. Dashboard mutants change the builders in
grafana/*.py: a label in a ``by`` clause, a label matcher's operator or label, a recording-rule
name swapped for another the file uses, an aggregation swapped, two adjacent table columns or
the queries that feed them swapped, a refId or an override's field name changed; the dashboards
(and the chart's copies) are regenerated from the mutated builder as ``make generate`` would,
and a mutant whose dashboards come out byte for byte the same is equivalent by construction.

Mutants are chosen deterministically (seeded by the file's name) and capped per file
(CHART_MUTATION_CAP, CHART_MUTATION_DASHBOARD_CAP) so that the run stays near 15 minutes on two
cores. Each runs in a scratch copy of the repository (.mutation/chart-work/N, one per worker)
against the fast tests that render the chart (CHART_TESTS) or read the dashboards
(DASHBOARD_TESTS), none of which needs a cluster; it is killed when they fail (they pass
unmutated: checked first). Writes docs/chart-mutation-report.md and exits 1 when under 90% of
the non-equivalent mutants are killed or a survivor is neither killed nor explained in
mutation/chart_equivalents.toml.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mutation.reruns import merge_rerun

REPO = Path(__file__).resolve().parent.parent
STATE = REPO / ".mutation" / "chart-work"
RESULTS = STATE / "results.json"
EQUIVALENTS = Path(__file__).with_name("chart_equivalents.toml")
REPORT = REPO / "docs" / "chart-mutation-report.md"
TARGET = 0.90
TIMEOUT_S = 300
SEED = 36
CHART = "helm/trainwatch"
TEMPLATES = f"{CHART}/templates"
VALUES = f"{CHART}/values.yaml"
BUILDERS = "grafana"
# The fast tests that render the chart (helm template, no cluster): the chart test files (the
# wiring first: it kills most mutants soonest) and test_compose's comparison of the chart with
# docker-compose.yml.
CHART_TESTS = ("tests/test_helm_wiring.py", "tests/test_helm.py", "tests/test_helm_values.py",
               "tests/test_helm_guards.py", "tests/test_helm_sharding.py",
               "tests/test_helm_auto_instrumentation.py", "tests/test_compose.py")
DASHBOARD_TESTS = ("tests/test_dashboards.py", "tests/test_grafana_provisioning.py",
                   "tests/test_dashboard_queries.py")
# Copied into each scratch copy: everything but these (linked instead where a test needs them).
SKIP = {".git", ".mutation", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
        ".gpu-check", ".venv", ".venv-run", ".tools", "build", "node_modules", ".devtree", ".ci"}
LINKED = (".venv", ".tools")


@dataclass
class Mutant:
    file: str        # repository path of the mutated file
    kind: str
    change: str      # `old` -> `new`, with (#n) when the file has the same change twice
    text: str = field(repr=False)  # the mutated file
    diff: str = ""
    outcome: str = ""
    detail: str = ""
    seconds: float = 0.0


# --- chart mutants --------------------------------------------------------------------------

_INT = re.compile(r"(?<![\w.$/-])(\d{2,5})(?![\w.])")
_PORTISH = re.compile(r"port|Port|PORT")
_QUOTED = re.compile(r'(?<!include )(?<!define )(?<!template )(?<!required )"([A-Za-z][\w./-]*)"')
_BARE = re.compile(r"^(\s*-?\s*[\w./-]+:\s+)([a-z][a-z0-9-]*)\s*$")
_DEFINE_LITERAL = re.compile(r'(\{\{-? define "[\w.]+" -?\}\})([\w./-]+)(\{\{-? end)')
_IF = re.compile(r"\{\{(-?) if (.+?) (-?)\}\}")
_ENTRY = re.compile(r"^(\s*)- name: ")
_BOOL = re.compile(r"^(\s*\w+:\s+)(true|false)(\s*(#.*)?)$")


def _ports(texts: dict[str, str]) -> list[int]:
    """The port numbers the chart uses (integers of four or five digits on a line naming a port)."""
    found = {int(n) for text in texts.values() for line in text.splitlines()
             if _PORTISH.search(line) for n in _INT.findall(line) if 1024 <= int(n) <= 65535}
    return sorted(found)


def _block_end(lines: list[str], at: int) -> int:
    """The index after the YAML list item starting at lines[at] (its deeper-indented lines)."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    end = at + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and (len(line) - len(line.lstrip()) <= indent):
            break
        end += 1
    return end


def chart_candidates(path: str, text: str, ports: list[int]) -> Iterator[tuple[str, str, str]]:
    """(kind, change, mutated text) of each textual mutant of one chart file."""
    lines = text.split("\n")

    def with_line(i: int, new: str | None) -> str:
        return "\n".join(lines[:i] + ([] if new is None else [new]) + lines[i + 1:])

    in_match, match_indent = False, 0
    in_selector_define = in_comment = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if "{{/*" in line or "{{- /*" in line:
            in_comment = True
        if in_comment:
            in_comment = "*/" not in line
            continue
        if stripped.startswith("#"):
            continue
        # integers: a port moved one step or to another port of the chart; others one step
        for m in _INT.finditer(line):
            old = int(m.group(1))
            if "{{" in line[:m.start()] and "}}" not in line[:m.start()].rsplit("{{", 1)[-1] \
                    and not _PORTISH.search(line):
                continue
            news = [old + 1]
            if _PORTISH.search(line) and old in ports:
                news.append(next((p for p in ports if p != old and p > old), ports[0]))
            for new in news:
                yield ("number", f"`{stripped}`: {old} -> {new}",
                       with_line(i, line[:m.start()] + str(new) + line[m.end():]))
        for m in _QUOTED.finditer(line):
            yield ("value", f"`{stripped}`: \"{m.group(1)}\" -> \"{m.group(1)}-x\"",
                   with_line(i, line[:m.start()] + f'"{m.group(1)}-x"' + line[m.end():]))
        bare = _BARE.match(line)
        if bare and "{{" not in line and not path.endswith("values.yaml") or (
                bare and path.endswith("values.yaml") and bare.group(2) not in ("true", "false")):
            yield ("value", f"`{stripped}`: {bare.group(2)} -> {bare.group(2)}-x",
                   with_line(i, bare.group(1) + bare.group(2) + "-x"))
        for m in _DEFINE_LITERAL.finditer(line):
            yield ("value", f"`{stripped}`: {m.group(2)} -> {m.group(2)}-x",
                   with_line(i, line[:m.start(2)] + m.group(2) + "-x" + line[m.end(2):]))
        for m in _IF.finditer(line):
            new = f"{{{{{m.group(1)} if not ({m.group(2)}) {m.group(3)}}}}}"
            yield ("if-negated", f"`{m.group(0)}` -> `{new}`",
                   with_line(i, line[:m.start()] + new + line[m.end():]))
        if _ENTRY.match(line):
            end = _block_end(lines, i)
            yield ("entry-removed", f"`{stripped}` removed ({end - i} lines)",
                   "\n".join(lines[:i] + lines[end:]))
        b = _BOOL.match(line)
        if b and path.endswith("values.yaml"):
            flipped = "false" if b.group(2) == "true" else "true"
            yield ("switch", f"`{stripped}` -> {flipped}",
                   with_line(i, b.group(1) + flipped + b.group(3)))
        # a selector label dropped: a line under matchLabels:, or of the selectorLabels define
        if stripped.startswith("{{- define \"trainwatch.selectorLabels\""):
            in_selector_define = True
        elif in_selector_define and stripped.startswith("{{- end"):
            in_selector_define = False
        elif in_selector_define and stripped and ":" in stripped:
            yield ("selector-dropped", f"selectorLabels `{stripped}` dropped", with_line(i, None))
        indent = len(line) - len(line.lstrip())
        if in_match and stripped and indent > match_indent:
            yield ("selector-dropped", f"matchLabels `{stripped}` dropped", with_line(i, None))
        elif stripped:
            in_match = False
        if stripped == "matchLabels:":
            in_match, match_indent = True, indent


# --- dashboard mutants ----------------------------------------------------------------------

_BY = re.compile(r"""\bby\((['"])(\w+)\1""")
_MATCHER = re.compile(r"""(\b[a-z_]+)(=~|!~|!=|=)(\\?["'])""")
_NAME_ATTR = re.compile(r"\b(?:q\.names|n|names)\.([a-z_]\w*)\b")
_AGG = {"sum": "max", "max": "min", "min": "max", "avg": "max", "topk": "bottomk",
        "count": "sum"}
_AGG_RE = re.compile(r"\b(sum|max|min|avg|topk|count)(?= ?[({])(?![\w])")
_OTHER_LABEL = {"instance": "nodename", "nodename": "instance", "experiment": "trial",
                "trial": "experiment", "rank": "gpu", "gpu": "rank", "cause": "phase",
                "phase": "cause", "k8s_namespace": "namespace", "uuid": "gpu"}


def _strings(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the string literals (f-strings whole) of a Python source."""
    tree = ast.parse(text)
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and (
                isinstance(node, ast.JoinedStr) or isinstance(node.value, str)):
            if node.end_lineno is None or node.end_col_offset is None:
                continue
            out.append((starts[node.lineno - 1] + node.col_offset,
                        starts[node.end_lineno - 1] + node.end_col_offset))
    return out


def _in_strings(spans: list[tuple[int, int]], at: int) -> bool:
    return any(s <= at < e for s, e in spans)


def _line_of(text: str, at: int) -> str:
    return text[text.rfind("\n", 0, at) + 1:text.find("\n", at) if "\n" in text[at:] else None].strip()


def dashboard_candidates(path: str, text: str) -> Iterator[tuple[str, str, str]]:
    """(kind, change, mutated text) of each mutant of one dashboard builder."""
    spans = _strings(text)

    def at(start: int, end: int, new: str, kind: str, what: str) -> tuple[str, str, str]:
        return (kind, f"`{_line_of(text, start)[:110]}`: {what}",
                text[:start] + new + text[end:])

    for m in _BY.finditer(text):
        label = m.group(2)
        other = _OTHER_LABEL.get(label, "instance")
        yield at(m.start(2), m.end(2), other, "by-clause", f"by {label} -> by {other}")
    for m in _MATCHER.finditer(text):
        if not _in_strings(spans, m.start()) or m.group(1) in ("id", "uid", "type"):
            continue
        op = {"=~": "!~", "!~": "=~", "=": "!=", "!=": "="}[m.group(2)]
        yield at(m.start(2), m.end(2), op, "matcher", f"{m.group(1)}{m.group(2)} -> {m.group(1)}{op}")
        label = m.group(1)
        if label in _OTHER_LABEL:
            yield at(m.start(1), m.end(1), _OTHER_LABEL[label], "matcher",
                     f"{label}{m.group(2)} -> {_OTHER_LABEL[label]}{m.group(2)}")
    attrs = sorted({m.group(1) for m in _NAME_ATTR.finditer(text)})
    for m in _NAME_ATTR.finditer(text):
        others = [a for a in attrs if a != m.group(1)]
        if others:
            new = others[(attrs.index(m.group(1))) % len(others)]
            yield at(m.start(1), m.end(1), new, "metric", f"{m.group(1)} -> {new}")
    for m in re.finditer(r"\btrainwatch_[a-z_]+\b", text):
        if _in_strings(spans, m.start()):
            yield at(m.start(), m.end(), m.group(0) + "_x", "metric",
                     f"{m.group(0)} -> {m.group(0)}_x")
    for m in _AGG_RE.finditer(text):
        if _in_strings(spans, m.start()):
            new = _AGG[m.group(1)]
            yield at(m.start(), m.end(), new, "aggregation", f"{m.group(1)} -> {new}")
    # adjacent Column(...) or Query(...) entries of one list swapped
    tree = ast.parse(text)
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col

    for node in ast.walk(tree):
        if not isinstance(node, ast.List):
            continue
        calls = [e for e in node.elts if isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                 and e.func.id in ("Column", "Query")]
        for a, b in itertools.pairwise(calls):
            if a.func.id != b.func.id:  # type: ignore[attr-defined]
                continue
            sa, ea = offset(a.lineno, a.col_offset), offset(a.end_lineno, a.end_col_offset)  # type: ignore[arg-type]
            sb, eb = offset(b.lineno, b.col_offset), offset(b.end_lineno, b.end_col_offset)  # type: ignore[arg-type]
            if text[sa:ea] == text[sb:eb]:
                continue
            kind = "column-swap" if a.func.id == "Column" else "query-swap"  # type: ignore[attr-defined]
            yield (kind, f"`{_line_of(text, sa)[:60]}` <-> `{_line_of(text, sb)[:60]}`",
                   text[:sa] + text[sb:eb] + text[ea:sb] + text[sa:ea] + text[eb:])
    if path.endswith("panels.py"):
        for old, new in (('ord("A")', 'ord("B")'), ("ord('A')", "ord('B')"),
                         ('"Value" if single', '"Value #A" if single'),
                         ("override_by_name(column.header", "override_by_name(column.unit"),
                         ("renames[value_field] = column.header",
                          "renames[value_field] = column.header.lower()"),
                         ('"excludeByName"', '"excludeByNames"'),
                         ('("Time", "__name__", "job", *hide)', '("Time", "__name__", *hide)'),
                         ('id_val="merge"', 'id_val="joinByField"'),
                         ("if not single:", "if single:"),
                         ("instant=True, table=True", "instant=True, table=False")):
            for k, m in enumerate(re.finditer(re.escape(old), text)):
                yield ("panel-helper", f"`{old}` -> `{new}`" + (f" (#{k + 1})" if k else ""),
                       text[:m.start()] + new + text[m.end():])


# --- choosing and running ---------------------------------------------------------------

def _read_tree(root: Path) -> dict[str, str]:
    # NOTES.txt is prose shown after an install, not an object a test can render and read
    files = sorted(p for p in (root / BUILDERS).glob("*.py")
                   if p.name not in ("__init__.py", "generate.py"))
    files += sorted(p for p in (root / TEMPLATES).iterdir() if p.is_file() and p.suffix != ".txt")
    files += [root / VALUES]
    return {p.relative_to(root).as_posix(): p.read_text() for p in files}


def build_mutants(texts: dict[str, str], cap: int, dashboard_cap: int,
                  values_cap: int) -> list[Mutant]:
    """The chosen mutants of every file: all candidates, de-duplicated, then a seeded sample
    of at most the file's cap, in the file's order."""
    ports = _ports({k: v for k, v in texts.items() if k.startswith(CHART)})
    out: list[Mutant] = []
    for path, text in texts.items():
        if path.startswith(BUILDERS):
            found, limit = list(dashboard_candidates(path, text)), dashboard_cap
        else:
            found = list(chart_candidates(path, text, ports))
            limit = values_cap if path == VALUES or path.endswith("_helpers.tpl") else cap
        seen: Counter[str] = Counter()
        unique: list[Mutant] = []
        texts_seen: set[str] = set()
        for kind, change, mutated in found:
            if mutated == text or mutated in texts_seen:
                continue
            texts_seen.add(mutated)
            seen[change] += 1
            label = change if seen[change] == 1 else f"{change} (#{seen[change]})"
            unique.append(Mutant(path, kind, label, mutated, _diff(path, text, mutated)))
        rng = random.Random(f"{SEED}:{path}")
        # spread the sample over the kinds: one of each kind first, then the rest at random
        by_kind: dict[str, list[Mutant]] = {}
        for m in unique:
            by_kind.setdefault(m.kind, []).append(m)
        picked: list[Mutant] = []
        pools = {k: rng.sample(v, len(v)) for k, v in sorted(by_kind.items())}
        while len(picked) < min(limit, len(unique)):
            for pool in pools.values():
                if pool and len(picked) < limit:
                    picked.append(pool.pop())
        out += sorted(picked, key=unique.index)
    return out


def _diff(path: str, old: str, new: str) -> str:
    return "".join(list(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                             f"a/{path}", f"b/{path}", n=0))[2:])[:1500]


def snapshot(rev: str, into: Path) -> None:
    """A scratch copy of the repository in ``into``: the working tree, or with ``rev`` that
    commit's tracked files; the virtual environment and tools linked, not copied."""
    shutil.rmtree(into, ignore_errors=True)
    if rev:
        into.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    else:
        shutil.copytree(REPO, into, symlinks=True,
                        ignore=lambda d, names: [n for n in names if Path(d) == REPO and n in SKIP
                                                 or n == "__pycache__"])
    for name in LINKED:
        if (REPO / name).exists() and not (into / name).exists():
            (into / name).symlink_to(REPO / name)


def pytest(work: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    argv = [str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-x", "-q",
            "-p", "no:cacheprovider", "--no-header", "-o", "addopts=", *tests]
    try:
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S}s"


def regenerate(work: Path) -> tuple[int, str]:
    """The dashboards and the chart's copies regenerated in ``work`` (make dashboards chart-files)."""
    py = str(REPO / ".venv" / "bin" / "python")
    for module in ("grafana.generate", "helm.sync_chart_files"):
        proc = subprocess.run([py, "-m", module], cwd=work, capture_output=True, text=True,
                              timeout=120, check=False)
        if proc.returncode:
            return proc.returncode, f"{module}: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return 0, ""


def generated(work: Path) -> dict[str, bytes]:
    return {p.relative_to(work).as_posix(): p.read_bytes()
            for folder in ("grafana/dashboards", f"{CHART}/files/dashboards")
            for p in sorted((work / folder).glob("*.json"))}


def judge(m: Mutant, rc: int, out: str) -> None:
    if rc == 0:
        m.outcome, m.detail = "survived", ""
        return
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.MULTILINE)
    m.outcome = "killed"
    m.detail = failed[0] if failed else (out.strip().splitlines() or ["failed"])[-1][:200]


def run_all(jobs: int, argv: list[str]) -> None:
    began = time.monotonic()
    rev = os.environ.get("CHART_MUTATION_REV", "")
    STATE.mkdir(parents=True, exist_ok=True)
    works = [STATE / f"work-{i}" for i in range(jobs)]
    for work in works:
        snapshot(rev, work)
    texts = _read_tree(works[0])
    mutants = build_mutants(texts, int(os.environ.get("CHART_MUTATION_CAP", "1")),
                            int(os.environ.get("CHART_MUTATION_DASHBOARD_CAP", "8")),
                            int(os.environ.get("CHART_MUTATION_VALUES_CAP", "5")))
    original_generated = generated(works[0])
    for tests in (CHART_TESTS, DASHBOARD_TESTS):
        rc, out = pytest(works[0], tests)
        if rc:
            raise SystemExit(f"the tests fail unmutated in {works[0]}:\n{out[-3000:]}")
    indexes, last = chosen(mutants, argv)
    print(f"{len(indexes)} of {len(mutants)} mutants, {jobs} at a time", file=sys.stderr)
    free: queue.Queue[Path] = queue.Queue()
    for work in works:
        free.put(work)

    def one(index: int) -> None:
        m = mutants[index]
        work = free.get()
        start = time.monotonic()
        try:
            (work / m.file).write_text(m.text)
            if m.file.startswith(BUILDERS):
                rc, out = regenerate(work)
                if rc:
                    m.outcome, m.detail = "killed", f"make dashboards fails: {out}"[:200]
                elif generated(work) == original_generated:
                    m.outcome, m.detail = "equivalent", "the dashboards come out byte for byte the same"
                else:
                    judge(m, *pytest(work, DASHBOARD_TESTS))
            else:
                judge(m, *pytest(work, CHART_TESTS))
        finally:
            (work / m.file).write_text(texts[m.file])
            if m.file.startswith(BUILDERS):
                for name, data in original_generated.items():
                    (work / name).write_bytes(data)
            m.seconds = round(time.monotonic() - start, 1)
            free.put(work)
        print(f"[{index + 1}/{len(mutants)}] {m.outcome:10} {m.seconds:5.1f}s {m.file}: "
              f"{m.change[:120]}", file=sys.stderr)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, indexes))
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = subprocess.run(["git", "rev-parse", "--short", rev or "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=False).stdout.strip()
    fresh = {(m.file, m.change): {k: v for k, v in asdict(m).items() if k != "text"}
             for m in (mutants[i] for i in indexes)}
    if last:
        results = merge_rerun(
            last, fresh, "file",
            f"{now} at {head}{' + uncommitted edits' if not rev else ''}: {len(indexes)} "
            f"mutants ({' '.join(argv)}) in {round(time.monotonic() - began)} s")
    else:
        results = {"seconds": round(time.monotonic() - began), "jobs": jobs, "finished": now,
                   "head": head + ("" if rev else " + uncommitted edits"),
                   "mutants": list(fresh.values())}
    RESULTS.write_text(json.dumps(results, indent=1))


def chosen(mutants: list[Mutant], argv: list[str]) -> tuple[list[int], dict[str, Any]]:
    if not argv:
        return list(range(len(mutants))), {}
    last = json.loads(RESULTS.read_text())
    if argv == ["--survivors"]:
        wanted = {(m["file"], m["change"]) for m in last["mutants"] if m["outcome"] == "survived"}
        return [i for i, m in enumerate(mutants) if (m.file, m.change) in wanted], last
    return [i for i, m in enumerate(mutants) if m.file in argv], last


# --- report -----------------------------------------------------------------------------

def write_report(results: dict[str, Any], equivalents: list[dict[str, str]],
                 path: Path = REPORT) -> int:
    rows: dict[str, Counter[str]] = {}
    survivors = []
    for m in results["mutants"]:
        if m["outcome"] == "survived":
            why = next((e["why"] for e in equivalents
                        if e["file"] == m["file"] and e["change"] == m["change"]), None)
            if why:
                m["outcome"], m["detail"] = "equivalent", why
            survivors.append((m, why))
        rows.setdefault(m["file"], Counter())[m["outcome"]] += 1
    total = Counter(m["outcome"] for m in results["mutants"])
    judged = total["killed"] + total["survived"]
    score = total["killed"] / judged if judged else 0.0
    chart = Counter(m["outcome"] for m in results["mutants"] if m["file"].startswith(CHART))
    boards = Counter(m["outcome"] for m in results["mutants"] if m["file"].startswith(BUILDERS))
    lines = [
        "# Chart and dashboard mutation report",
        "",
        "Written by `make chart-mutation` (mutation/chart.py, issue 36): the Helm chart's",
        "templates and values.yaml defaults changed one textual mutant at a time (an integer or",
        "port moved, a label, selector or job value altered, an `{{ if }}` negated, a `- name:`",
        "entry removed, a selector label dropped, a switch flipped), run against the fast chart",
        f"tests ({', '.join(CHART_TESTS)}); the Grafana dashboard builders (grafana/*.py)",
        "changed one mutant at a time (a `by` label, a matcher, a recording-rule name, an",
        "aggregation, two table columns or their queries swapped, a refId or override field),",
        "the dashboards and the chart's copies regenerated from them, run against",
        f"{', '.join(DASHBOARD_TESTS)}. Mutants are chosen deterministically (seed {SEED}) and",
        "capped per file. A builder mutant whose dashboards come out byte for byte the same is",
        "equivalent by construction; other equivalents are explained in",
        "mutation/chart_equivalents.toml.",
        "",
        (f"Last run: {results['finished']} at {results['head']}, {len(results['mutants'])} "
         f"mutants, {results['jobs']} at a time, {results['seconds'] // 60} min "
         f"{results['seconds'] % 60} s."),
        (f"**{total['killed']} killed, {total['survived']} survived, {total['equivalent']} "
         f"equivalent: {score:.1%} of the non-equivalent mutants killed** (target "
         f"{TARGET:.0%}); chart {chart['killed']} killed / {chart['survived']} survived / "
         f"{chart['equivalent']} equivalent, dashboards {boards['killed']} / "
         f"{boards['survived']} / {boards['equivalent']}."),
    ]
    if "before" in results:
        lines.append(f"Before the assertions this run led to (tests/test_helm_wiring.py, "
                     f"tests/test_dashboard_queries.py): {results['before']}.")
    for rerun in results.get("reruns", []):
        lines.append(f"Rerun since (after new assertions), merged into it: {rerun}.")
    lines += ["", "| file | mutants | killed | survived | equivalent |", "|---|---|---|---|---|"]
    for file, c in sorted(rows.items()):
        lines.append(f"| {file} | {sum(c.values())} | {c['killed']} | {c['survived']} | "
                     f"{c['equivalent']} |")
    lines += ["", "## Survivors", ""]
    for m, why in survivors:
        lines += [(f"- {m['file']} ({m['kind']}) {m['change']}: "
                  f"{why or '**NOT EXPLAINED**: add an assertion that kills it, or an entry'}"),
                  "", "  ```diff", *("  " + d for d in m["diff"].splitlines()), "  ```", ""]
    if not survivors:
        lines.append("None.")
    if results.get("before_survivors"):
        lines += ["", "## The first run's survivors, each killed since by the assertions it led to",
                  ""]
        for m in results["before_survivors"]:
            lines += [f"- {m['file']} ({m['kind']}) {m['change']}", "", "  ```diff",
                      *("  " + d for d in m["diff"].splitlines()), "  ```", ""]
    same = [m for m in results["mutants"] if m["outcome"] == "equivalent" and m not in
            [s for s, _ in survivors]]
    if same:
        lines += ["", "## Builder mutants that leave the dashboards byte for byte the same", "",
                  "(a docstring or doctest changed, or a name the output never reaches)", ""]
        lines += [f"- {m['file']} ({m['kind']}) {m['change']}" for m in same]
    path.write_text("\n".join(lines) + "\n")
    unexplained = [m for m, why in survivors if not why]
    print(f"{path.name}: {total['killed']}/{judged} killed ({score:.1%}), "
          f"{len(unexplained)} unexplained survivors", file=sys.stderr)
    return 0 if score >= TARGET and not unexplained else 1


def main(argv: list[str]) -> int:
    if argv[:1] != ["--report"]:
        run_all(int(os.environ.get("CHART_MUTATION_JOBS", "2")), argv)
    results = json.loads(RESULTS.read_text())
    equivalents = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", []) \
        if EQUIVALENTS.exists() else []
    return write_report(results, equivalents)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
