"""trial_instrumentation/names.py against the contract it implements (docs/design.md's Trial
section, docs/instrumentation.md's variables): each name is the documented one, in both
directions, and no two names of the module share a value (one of them would be the wrong one).
The live check of what a trial really pushes is tests/test_design_contract.py; this one is fast
enough to run against every mutant of names.py."""

from __future__ import annotations

import re
from collections import Counter

from benchmarks.stack import REPO
from trial_instrumentation import names

DESIGN = (REPO / "docs" / "design.md").read_text()
INSTRUMENTATION = (REPO / "docs" / "instrumentation.md").read_text()
CONSTANTS = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}


def trial_section() -> str:
    start = DESIGN.index("### Trial (`trial_instrumentation/names.py`")
    return DESIGN[start:DESIGN.index("\n### ", start + 1)]


def documented_row(metric: str) -> str:
    (row,) = [line for line in trial_section().splitlines()
              if line.startswith((f"| `{metric}` |", f"| `{metric}_total` |"))]
    return row


def test_no_two_names_share_a_value() -> None:
    shared = {v: n for v, n in Counter(CONSTANTS.values()).items() if n > 1}
    assert shared == {}
    assert len(CONSTANTS) > 60  # the module's names, not an empty read


def test_the_job_and_grouping_key_are_the_documented_ones() -> None:
    heading = trial_section().splitlines()[0]
    assert heading.endswith(f"pushed as job `{names.JOB}`)")
    key = ", ".join(f"`{label}`" for label in names.GROUPING_LABELS)
    assert f"carries the grouping key {key}" in " ".join(trial_section().split())


def test_the_pushed_metric_names_are_the_documented_ones_both_ways() -> None:
    documented = {m.removesuffix("_total") for m in
                  re.findall(r"^\| `(trainwatch_trial_[a-z_]+)` \|", trial_section(), re.MULTILINE)}
    declared = {v for v in CONSTANTS.values() if v.startswith("trainwatch_trial_")}
    assert declared == documented
    assert names.STEPS in documented and names.JOB not in declared


def test_counters_are_declared_without_total_and_documented_with_it() -> None:
    for metric in (names.STEPS, names.SAMPLES, names.PUSH_FAILURES, names.LOADER_CPU_SECONDS,
                   names.LOADER_READ_BYTES, names.LOADER_RCHAR_BYTES):
        assert documented_row(metric).startswith(f"| `{metric}_total` | counter |"), metric
    for metric in (names.TRIAL_INFO, names.START_TIME, names.EXIT, names.COMPUTE_THREADS,
                   names.LOADER_WORKERS):
        assert documented_row(metric).startswith(f"| `{metric}` | gauge |"), metric
    for metric in (names.PHASE_SECONDS, names.STEP_SECONDS):
        assert documented_row(metric).startswith(f"| `{metric}` | histogram |"), metric


def test_the_exit_reasons_are_the_documented_words_in_their_order() -> None:
    row = documented_row(names.EXIT)
    said = re.findall(r"`(clean|terminated|failed|[a-z]+)` \(", row)
    assert said == [names.EXIT_CLEAN, names.EXIT_TERMINATED, names.EXIT_FAILED]


def test_the_loader_process_labels_are_the_documented_ones() -> None:
    row = documented_row(names.LOADER_CPU_SECONDS)
    assert f'(`process="{names.PROCESS_MAIN}"`)' in row
    assert f'(`"{names.PROCESS_WORKERS}"`: DataLoader workers' in row


def test_every_trainwatch_variable_a_user_sets_is_documented() -> None:
    # The stack's own marks on its processes are set by trainwatch, never by a user.
    internal = {names.CLI_ENV_STACK, names.CLI_ENV_STACK_SERVICE, names.CLI_ENV_DEMO_STATE_DIR}
    variables = {v for v in CONSTANTS.values() if v.startswith("TRAINWATCH_")} - internal
    documented = set(re.findall(r"TRAINWATCH_[A-Z0-9_]*[A-Z0-9]", INSTRUMENTATION + DESIGN
                                + (REPO / "README.md").read_text()
                                + (REPO / "helm" / "README.md").read_text()))
    assert variables - documented == set()
    assert {names.ENV_PUSHGATEWAY, names.CLI_ENV_PROMETHEUS, names.AUTO_ENV} <= variables
    assert set(names.OTHER_ENV) >= internal | {names.CLI_ENV_PROMETHEUS, names.CLI_ENV_STATE_DIR}


def test_the_phase_names_are_the_documented_ones_in_their_order() -> None:
    row = documented_row(names.PHASE_SECONDS)
    standard = row.split("The standard phases (Determined's names) are ", 1)[1].split(";", 1)[0]
    assert tuple(re.findall(r"`([a-z_]+)`", standard)) == names.STANDARD_PHASES
    assert f"`{names.WAIT_FOR_RANKS}` is the time a rank of a multi-rank trial waits" in row


def test_the_phase_buckets_off_word_is_the_documented_one() -> None:
    said = " ".join(INSTRUMENTATION.split())
    assert (f"`{names.ENV_PHASE_BUCKETS}={names.PHASE_BUCKETS_NONE}` (the phases push sums and "
            "counts only") in said
