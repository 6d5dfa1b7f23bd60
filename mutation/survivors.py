"""The survivors of targets' last runs (mutation/run.py) run again against the tests as they are
now: after tests were written for them, without another full run of the target.

    python -m mutation.survivors gc compare

Each survivor of the last run (read from its cosmic-ray session, .mutation/NAME.sqlite) is
applied alone to a fresh copy of the working tree (.mutation/survivors-NAME) and the target's
tests are run on it, as run.py runs every mutant. Its status in .mutation/results/NAME.json is
replaced by the new one, the rerun is noted in the results (``reruns``), the ledger's summary
(mutation/ledger.py) is written again and so is the report. Refused when the module changed
since the run: its mutants may differ then, and the target must be run whole.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from mutation.ledger import save
from mutation.run import COSMIC_RAY, REPO, RESULTS, STATE, copy_tree, kill_tree, report

# A survivor's test run past this many seconds is killed (a mutant the new tests send into a
# loop); run.py's timeout is ten times the unmutated run, at least 20 s.
TIMEOUT = 300.0


def survivors(session: Path) -> list[dict[str, Any]]:
    """Each surviving mutant of a session: its module, operator, occurrence and line."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    found = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if (result.worker_outcome == WorkerOutcome.NORMAL
                    and result.test_outcome == TestOutcome.SURVIVED):
                [mutation] = item.mutations
                found.append({"module": str(mutation.module_path),
                              "operator": mutation.operator_name,
                              "occurrence": mutation.occurrence,
                              "line": mutation.start_pos[0], "diff": result.diff or ""})
    return found


def same(ran: Path, now: Path) -> bool:
    """Whether the module (a file or a package) is as the last run mutated it."""
    def files(root: Path) -> dict[Path, bytes]:
        return ({Path(): root.read_bytes()} if root.is_file() else
                {p.relative_to(root): p.read_bytes() for p in root.rglob("*.py")})
    return ran.exists() and now.exists() and files(ran) == files(now)


def rerun(target: dict[str, Any]) -> dict[str, Any]:
    """Run ``target``'s last survivors again; its results with their new statuses."""
    name = target["name"]
    results = RESULTS / f"{name}.json"
    session = STATE / f"{name}.sqlite"
    if not results.exists() or not session.exists():
        raise SystemExit(f"{name}: no finished run to take the survivors of")
    if not same(STATE / f"work-{name}" / target["module"], REPO / target["module"]):
        raise SystemExit(f"{name}: {target['module']} changed since its last run; run the "
                         f"target whole (make mutation TARGETS={name})")
    work = STATE / f"survivors-{name}"
    lock = (STATE / f"survivors-{name}.lock").open("w")
    try:  # a second rerun of the target would mutate the same copy under the first one
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"{name}: its survivors are being run again already") from None
    copy_tree(work)
    tests = " ".join(shlex.quote(t) for t in target["tests"])
    command = f"{shlex.quote(sys.executable)} -m pytest -x -q -p no:cacheprovider {tests}"
    unmutated = subprocess.run(shlex.split(command), cwd=work, capture_output=True, text=True,
                               check=False)
    if unmutated.returncode != 0:  # else every mutant would read as killed
        raise SystemExit(f"{name}: the tests fail without a mutant:\n{unmutated.stdout[-3000:]}")
    last = json.loads(results.read_text())
    started = time.monotonic()
    outcomes = []
    for mutant in survivors(session):
        status = _run_one(work, mutant, command)
        outcomes.append((mutant, status))
        print(f"  {name} {mutant['module']}:{mutant['line']} {mutant['operator']}: {status}",
              flush=True)
    killed = sum(status == "killed" for _, status in outcomes)
    record(last, outcomes, f"{datetime.date.today().isoformat()}: the {len(outcomes)} "
           f"survivors run again against the tests then ({killed} killed) in "
           f"{(time.monotonic() - started) / 60:.1f} min")
    results.write_text(json.dumps(last, indent=1))
    save(last, REPO)
    return last


def record(last: dict[str, Any], outcomes: list[tuple[dict[str, Any], str]], note: str) -> None:
    """Each rerun mutant's new status in ``last`` (a target's results; a mutant is the same one
    by module, operator, line and diff), and ``note`` added to its reruns."""
    new = {(m["module"], m["operator"], m["line"], m["diff"]): status for m, status in outcomes}
    for m in last["mutants"]:
        m["status"] = new.get((m["module"], m["operator"], m["line"], m["diff"]), m["status"])
    last.setdefault("reruns", []).append(note)


def _run_one(work: Path, mutant: dict[str, Any], command: str) -> str:
    """One mutant's status: killed, survived or error; a test run past TIMEOUT is killed (as
    run.py counts a timeout), and the copy of the tree is made again (the worker that timed out
    could not put the module back)."""
    worker = subprocess.Popen([str(COSMIC_RAY), "mutate-and-test", mutant["module"],
                               mutant["operator"], str(mutant["occurrence"]), command],
                              cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    try:
        out, _ = worker.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(worker.pid)
        worker.communicate()
        copy_tree(work)
        return "killed"
    outcome = json.loads(out)
    if outcome["worker_outcome"] != "normal":
        return f"error ({outcome['worker_outcome']})"
    return {"killed": "killed", "survived": "survived"}.get(outcome["test_outcome"],
                                                             "error (no outcome)")


def main(argv: list[str]) -> int:
    config = tomllib.loads((REPO / "mutation" / "targets.toml").read_text())
    targets = {t["name"]: t for t in config["target"]}
    unknown = set(argv) - set(targets)
    if not argv or unknown:
        raise SystemExit(f"name the targets whose survivors to run again; known: "
                         f"{sorted(targets)}")
    for name in argv:
        print(f"== {name}: the survivors of its last run", flush=True)
        rerun(targets[name])
    return 0 if report(targets, config) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
