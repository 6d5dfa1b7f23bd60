"""Mutation testing with cosmic-ray over the modules in targets.toml (``make mutation``).

    python -m mutation.run              # every target, two at a time (MUTATION_JOBS=2)
    python -m mutation.run host verdict # some targets; the others keep their last results
    python -m mutation.run --report     # only rewrite the report (after editing targets.toml)
    python -m mutation.run --changed    # only the lines a change touched (mutation/changed.py)

Each target gets its own copy of the working tree in .mutation/work-NAME (cosmic-ray edits
the module in place there, so an interrupted run never leaves a mutant in your tree, and
targets can run side by side), runs the target's fast unit tests once unmutated, then once per
mutant, keeps the whole run in .mutation/results/ and its summary in the committed ledger
(mutation/results/, mutation/ledger.py), and writes docs/mutation-report.md from the ledger:
every target's last run, wherever it ran. Exit 1 when a target kills under 90% of its mutants
or a survivor is not listed as equivalent in targets.toml.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mutation.ledger import changed_since, head, load, save

REPO = Path(__file__).resolve().parent.parent
STATE = REPO / ".mutation"
RESULTS = STATE / "results"
REPORT = REPO / "docs" / "mutation-report.md"
TARGET_SCORE = 0.90
COSMIC_RAY = Path(sys.executable).parent / "cosmic-ray"


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process under it, each one's process group too: a test run
    that timed out leaves none running (cosmic-ray starts pytest in a session of its own, which
    killing the worker's group alone never reached: an endless mutant's pytest ran on)."""
    import psutil

    try:
        top = psutil.Process(pid)
        tree = [*top.children(recursive=True), top]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        try:
            group = os.getpgid(proc.pid)
            if group != os.getpgrp():  # never the caller's own group
                os.killpg(group, signal.SIGKILL)
            os.kill(proc.pid, signal.SIGKILL)  # one in the caller's group or leading none
        except (ProcessLookupError, PermissionError):
            continue  # gone already


def copy_tree(work: Path) -> None:
    """Tracked and untracked-but-not-ignored files, as they are now."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    shutil.rmtree(work, ignore_errors=True)
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every annotation: never evaluated under ``from __future__ import
    annotations``, so a mutant there (``int | None`` -> ``int - None``) is equivalent."""
    return annotation_spans_in(path.read_text())


def annotation_spans_in(text: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """annotation_spans of a module's source text."""
    spans = []
    for node in ast.walk(ast.parse(text)):
        found = []
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            found.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            found.append(node.returns)
        spans += [((a.lineno, a.col_offset), (a.end_lineno or a.lineno, a.end_col_offset or 0))
                  for a in found]
    return spans


def skip_annotation_mutants(session: Path, work: Path) -> int:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    skipped = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.work_items:
            for mutation in item.mutations:
                path = work / mutation.module_path
                if "from __future__ import annotations" not in path.read_text():
                    continue
                start, end = tuple(mutation.start_pos), tuple(mutation.end_pos)
                if any(a <= start and end <= b for a, b in annotation_spans(path)):
                    db.set_result(item.job_id, WorkResult(
                        worker_outcome=WorkerOutcome.SKIPPED, output="type annotation"))
                    skipped += 1
    return skipped


def skip_unchanged_mutants(session: Path, lines: dict[str, set[int]]) -> int:
    """Mark every mutant that does not start on a changed line skipped (``--changed``)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    skipped = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.work_items:
            for mutation in item.mutations:
                if mutation.start_pos[0] not in lines.get(Path(mutation.module_path).as_posix(),
                                                          set()):
                    db.set_result(item.job_id, WorkResult(
                        worker_outcome=WorkerOutcome.SKIPPED, output="unchanged line"))
                    skipped += 1
    return skipped


def checked_tests(target: dict[str, Any], work: Path) -> tuple[list[str], float]:
    """The target's pytest command, run once unmutated in a fresh copy of the tree at ``work``
    (SystemExit when it fails there), and the timeout a mutant's run gets: ten times that
    run, at least 20 s."""
    copy_tree(work)
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            *target["tests"]]
    started = time.monotonic()
    baseline = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    if baseline.returncode != 0:
        raise SystemExit(f"{target['name']}: the tests fail without a mutant:\n"
                         f"{baseline.stdout[-3000:]}")
    return argv, max(20.0, 10 * (time.monotonic() - started))


def run_target(target: dict[str, Any], lines: dict[str, set[int]] | None = None) -> dict[str, Any]:
    """One target's mutants; with ``lines`` (file -> changed line numbers) only theirs."""
    name = target["name"]
    work = STATE / f"work-{name}"
    on = head(REPO, target["module"])  # the module as copied, whatever is committed later
    started = time.monotonic()
    argv, timeout = checked_tests(target, work)
    command = shlex.join(argv)
    config = STATE / f"{name}.toml"
    config.write_text(f'[cosmic-ray]\nmodule-path = "{target["module"]}"\ntimeout = {timeout}\n'
                      f"excluded-modules = []\ntest-command = {json.dumps(command)}\n\n"
                      '[cosmic-ray.distributor]\nname = "local"\n')
    session = STATE / f"{name}.sqlite"
    session.unlink(missing_ok=True)
    subprocess.run([str(COSMIC_RAY), "init", str(config), str(session)], cwd=work, check=True)
    skipped = skip_annotation_mutants(session, work)
    if lines is not None:
        skip_unchanged_mutants(session, lines)
    subprocess.run([str(COSMIC_RAY), "exec", str(config), str(session)], cwd=work, check=True)
    return {"name": name, "module": target["module"], "head": on,
            "seconds": time.monotonic() - started,
            "annotation_mutants_skipped": skipped, "mutants": collect(session, work)}


def collect(session: Path, work: Path) -> list[dict[str, Any]]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    out = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            [mutation] = item.mutations
            lines = (work / mutation.module_path).read_text().splitlines()
            out.append({
                "module": str(mutation.module_path), "operator": mutation.operator_name,
                "line": mutation.start_pos[0], "source": lines[mutation.start_pos[0] - 1].strip(),
                # A timeout is a kill (cosmic-ray reports it so); a mutant that could not be
                # run at all (worker error, incompetent) is neither, and shown apart.
                "status": {TestOutcome.KILLED: "killed", TestOutcome.SURVIVED: "survived"}.get(
                    result.test_outcome, f"error ({result.worker_outcome})")
                if result.worker_outcome == WorkerOutcome.NORMAL
                else f"error ({result.worker_outcome})",
                "diff": result.diff or ""})
    return out


def main(argv: list[str]) -> int:
    config = tomllib.loads((REPO / "mutation" / "targets.toml").read_text())
    if argv == ["--report"]:  # after editing [[equivalent]] entries: no mutant is run
        return 0 if report({t["name"]: t for t in config["target"]}, config) else 1
    targets = {t["name"]: t for t in config["target"]}
    if argv == ["--changed"]:
        return run_changed(targets, config)
    unknown = set(argv) - set(targets)
    if unknown:
        raise SystemExit(f"unknown targets {sorted(unknown)}; known: {sorted(targets)}")
    STATE.mkdir(exist_ok=True)
    RESULTS.mkdir(exist_ok=True)

    lock = threading.Lock()

    def one(name: str) -> bool:
        print(f"== {name}: {targets[name]['module']}", flush=True)
        result = run_target(targets[name])
        print(f"== {name}: done in {result['seconds'] / 60:.1f} min", flush=True)
        with lock:  # the report after every target: an interrupted run still leaves one
            (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))
            save(result, REPO)
            return report(targets, config)

    started = time.monotonic()
    jobs = int(os.environ.get("MUTATION_JOBS", "2"))
    with ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(one, name) for name in argv or list(targets)]:
            future.result()
    print(f"all selected targets: {(time.monotonic() - started) / 60:.1f} min, {jobs} at a time")
    print(f"report: {REPORT.relative_to(REPO)}")
    return 0 if report(targets, config) else 1


def run_changed(targets: dict[str, dict[str, Any]], config: dict[str, Any]) -> int:
    """The changed lines' mutants of the targets a change touched; exit 1 on a survivor no
    [[equivalent]] entry explains. The full results and the report are left as they are."""
    from mutation.changed import changes, default_base, pick
    from mutation.report import explain

    base = os.environ.get("MUTATION_BASE") or default_base(REPO)
    found = changes(REPO, base)
    chosen, uncovered = pick(targets, found)
    if uncovered:
        print(f"changed since {base}, in no mutation target: {', '.join(uncovered)}")
    if not chosen:
        print(f"no mutation target changed since {base}")
        return 0
    (STATE / "changed").mkdir(parents=True, exist_ok=True)
    equivalents = [dict(e) for e in config.get("equivalent", [])]
    ok = True
    for name in chosen:
        print(f"== {name}: {targets[name]['module']}, changed lines since {base}", flush=True)
        result = run_target(targets[name], found)
        (STATE / "changed" / f"{name}.json").write_text(json.dumps(result, indent=1))
        mutants = result["mutants"]
        killed = sum(m["status"] == "killed" for m in mutants)
        alive = [m for m in mutants if m["status"] == "survived"]
        print(f"== {name}: {len(mutants)} mutants on changed lines, {killed} killed, "
              f"{len(alive)} survived, {result['seconds'] / 60:.1f} min")
        for m in alive:
            why = explain(m, equivalents)
            ok &= why is not None
            print(f"  survived {m['module']}:{m['line']} {m['operator']}: {m['source']}"
                  + (f" (equivalent: {why})" if why else "") + "\n" + m["diff"])
    return 0 if ok else 1


def report(targets: dict[str, dict[str, Any]], config: dict[str, Any]) -> bool:
    """Rewrite docs/mutation-report.md from every target's last result in the ledger
    (mutation/results/, committed: a run here and the ones before it, wherever they ran);
    True when all pass."""
    from mutation.report import write_report

    # Read again: entries added while a long run goes on count in the report it writes.
    config = tomllib.loads((REPO / "mutation" / "targets.toml").read_text())
    equivalents = [dict(e) for e in config.get("equivalent", [])]
    found, missing = load(list(targets))
    return write_report(found, equivalents, REPORT, TARGET_SCORE, missing=missing,
                        stale=[r["name"] for r in found if changed_since(r, REPO)],
                        uncovered=uncovered(list(targets.values())),
                        modules=len(product_modules()))


def uncovered(targets: list[dict[str, Any]]) -> list[str]:
    """The product modules (mutation/changed.py's PRODUCT folders, tracked .py files with
    code: not an empty or docstring-only __init__) that no target's module holds."""
    from mutation.changed import in_module

    return [path for path in product_modules()
            if not any(in_module(path, t["module"]) for t in targets)]


def product_modules() -> list[str]:
    """Every tracked product module with code in mutation/changed.py's PRODUCT folders."""
    from mutation.changed import PRODUCT

    listed = subprocess.run(["git", "ls-files", "--", *(f"{p}*.py" for p in PRODUCT)],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    return [path for path in listed if has_code(REPO / path)]


def has_code(path: Path) -> bool:
    """Whether a module has a statement other than its docstring and imports: a mutant needs
    one (an ``__init__`` that only re-exports has none)."""
    body = ast.parse(path.read_text()).body
    return any(not isinstance(node, ast.Import | ast.ImportFrom)
               and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               for node in body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
