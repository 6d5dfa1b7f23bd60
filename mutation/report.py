"""docs/mutation-report.md from the targets' results (see run.py)."""

from __future__ import annotations

import datetime
import fnmatch
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

UNEXPLAINED = "**NOT EXPLAINED**: add a test that kills it, or an [[equivalent]] entry"


def _cosmic_ray() -> str:
    """cosmic-ray's version; the report is also written where it is not installed (the
    suite's venv, `--report` after an edit to targets.toml)."""
    try:
        return version("cosmic-ray")
    except PackageNotFoundError:
        return "(not installed here)"


def explain(mutant: dict[str, Any], equivalents: list[dict[str, str]]) -> str | None:
    """The reason an [[equivalent]] entry gives for this survivor, if one matches it."""
    for entry in equivalents:
        if (entry["module"] == mutant["module"] and entry["source"] == mutant["source"]
                and fnmatch.fnmatchcase(mutant["operator"], entry["operator"])):
            entry["used"] = "yes"
            return entry["why"]
    return None


def write_report(results: list[dict[str, Any]], equivalents: list[dict[str, str]],
                 path: Path, target: float, missing: list[str] | None = None,
                 stale: list[str] | None = None, uncovered: list[str] | None = None,
                 modules: int | None = None) -> bool:
    """Write the report; True when every target has a complete run that reaches ``target``
    and every survivor is explained. ``missing``: targets with no completed run; ``stale``:
    targets whose module changed since their run (named, not failed: their score is old);
    ``uncovered``: product modules in no target (named, with their count, of ``modules``)."""
    ok = not missing
    rows, survivors, errors = [], [], []
    all_killed = all_alive = all_explained = 0
    for r in results:
        mutants = r["mutants"]  # a ledger's summary counts its killed ones in "killed"
        killed = r.get("killed", 0) + sum(m["status"] == "killed" for m in mutants)
        alive = [m for m in mutants if m["status"] == "survived"]
        errors += [m for m in mutants if m["status"].startswith("error")]
        explained = 0
        for m in alive:
            why = explain(m, equivalents)
            explained += why is not None
            ok &= why is not None
            survivors.append((r["name"], m, why))
        all_killed, all_alive = all_killed + killed, all_alive + len(alive)
        all_explained += explained
        score = killed / (killed + len(alive)) if killed + len(alive) else 1.0
        ok &= score >= target
        rows.append(f"| {r['name']} | `{r['module']}` | {killed + len(alive)} | {killed} | "
                    f"{len(alive)} ({explained} equivalent) | **{score:.1%}** | "
                    f"{r['annotation_mutants_skipped']} | {r['seconds'] / 60:.1f} min"
                    f"{' (cut short: ' + r['partial'] + ')' if r.get('partial') else ''} | "
                    f"{r.get('date', '?')} | {r.get('head', '?')} |")
        ok &= not r.get("partial")
    intro = (f"Written by `make mutation` (mutation/run.py, cosmic-ray {_cosmic_ray()}"
             f", last written {datetime.date.today().isoformat()}) from every target's last run,"
             " kept in mutation/results/ (ran: its date; head: the commit whose module it "
             "mutated, `+ edits` when the module had uncommitted changes). Each mutant is one "
             "small "
             "change to the module (an operator, a comparison, a constant, a loop made "
             "empty...), run against that module's fast unit tests (mutation/targets.toml); it "
             "is killed when a test fails or times out. Score: killed / (killed + survived); "
             f"the target is {target:.0%}. Times are wall-clock on a 2-core machine shared "
             "with other work.")
    header = ("| target | module | mutants | killed | survived | score "
              "| skipped: in annotations | time | ran | head |")
    annotations = ("Mutants inside type annotations are skipped, not counted: every module "
                   "here has `from __future__ import annotations`, so annotations are never "
                   "evaluated and such a mutant cannot change behaviour.")
    def share(killed: int, alive: int) -> str:
        return f"{killed / (killed + alive) if killed + alive else 1.0:.1%}"
    total = (f"Overall, {len(results)} targets: {all_killed:,} of {all_killed + all_alive:,} "
             f"mutants killed, **{share(all_killed, all_alive)}**; of the "
             f"{all_alive:,} survivors {all_explained:,} are explained as equivalent, so "
             f"{share(all_killed, all_alive - all_explained)} of the non-equivalent ones.")
    lines = ["# Mutation testing report", "", intro, "", total, "", header,
             "|---|---|---|---|---|---|---|---|---|---|", *rows, "", annotations, "", "## Survivors", ""]
    if not survivors:
        lines.append("None.")
    for name, m, why in survivors:
        verdict = f"equivalent: {why}" if why else UNEXPLAINED
        lines += [f"- **{name}** `{m['module']}:{m['line']}` {m['operator']}: `{m['source']}`",
                  f"  - {verdict}"]
    if errors:
        lines += ["", "## Mutants that could not be run", ""]
        lines += [f"- `{m['module']}:{m['line']}` {m['operator']}: {m['status']}" for m in errors]
    if missing:
        lines += ["", "## Targets without a completed run", "",
                  ("Not scored: no run of these targets has finished (run `make mutation "
                   f"TARGETS=\"{' '.join(missing)}\"`)."), ""]
        lines += [f"- {name}" for name in missing]
    if stale:
        lines += ["", "## Targets whose module changed since their run", "",
                  ("Their rows describe the module as it was at their head; run them again "
                   f"(`make mutation TARGETS=\"{' '.join(stale)}\"`, or `make mutation "
                   "CHANGED=1` for the changed lines only)."), ""]
        lines += [f"- {name}" for name in stale]
    if uncovered is not None:
        lines += ["", "## Product modules in no target", ""]
        of = f" of {modules}" if modules is not None else ""
        lines += ([f"{len(uncovered)}{of} modules: {', '.join(f'`{m}`' for m in uncovered)}."]
                  if uncovered else [f"None: every product module{of} is in a target."])
    unused = [e for e in equivalents if "used" not in e]
    if unused:
        lines += ["", "## [[equivalent]] entries that matched no survivor (stale?)", ""]
        lines += [f"- `{e['module']}` {e['operator']}: `{e['source']}`" for e in unused]
    path.write_text("\n".join(lines) + "\n")
    return ok
