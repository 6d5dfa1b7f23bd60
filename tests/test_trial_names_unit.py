"""The contract's fixed numbers and lists in trial_instrumentation.names, against what
docs/instrumentation.md promises: the bounds on what one trial creates, the default buckets, and
the variables the library reads (every other TRAINWATCH_* one is reported as unknown)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from trial_instrumentation import names

DOC = (Path(__file__).resolve().parent.parent / "docs" / "instrumentation.md").read_text()


def documented(pattern: str) -> str:
    found = re.search(pattern, DOC)
    assert found is not None, pattern
    return found[1]


def test_the_bounds_are_the_documented_ones() -> None:
    assert documented(r"\| at most (\d+) \(`MAX_PHASES`\) \|") == "64" == str(names.MAX_PHASES)
    assert (documented(r"at most (\d+) characters \(`MAX_LABEL_LENGTH`\)") == "256"
            == str(names.MAX_LABEL_LENGTH))
    assert (documented(r"at least ([\d.]+) s \(`MIN_PUSH_INTERVAL`\)") == "0.1"
            == str(names.MIN_PUSH_INTERVAL))


def test_the_default_buckets_double_from_half_a_millisecond_in_eighteen_bounds() -> None:
    assert "0.5 ms doubling to 65.536 s (18 bounds)" in DOC
    buckets = names.DEFAULT_BUCKETS
    assert len(buckets) == 18
    assert buckets[0] == 0.0005
    assert buckets[-1] == 65.536
    assert all(later == 2 * earlier for earlier, later in itertools.pairwise(buckets))


def test_the_phases_always_timed_are_the_standard_six_and_the_wait_for_ranks() -> None:
    assert names.STANDARD_PHASES == ("dataloader_next", "to_device", "train_batch",
                                     "step_lr_schedulers", "from_device", "reduce_metrics")
    assert names.ALWAYS_TIMED_PHASES == {*names.STANDARD_PHASES, "wait_for_ranks"}
    assert names.TIMING_MODES == ("wall", "cuda_sync", "cuda_events")


def test_the_library_reads_its_own_variables_and_no_removed_or_foreign_one() -> None:
    assert set(names.TRIAL_ENV) == {
        "TRAINWATCH_PUSHGATEWAY", "TRAINWATCH_EXPERIMENT", "TRAINWATCH_TRIAL",
        "TRAINWATCH_PUSH_INTERVAL", "TRAINWATCH_PHASE_BUCKETS", "TRAINWATCH_PULL_PORT",
        "TRAINWATCH_TIMING_MODE", "TRAINWATCH_PUSHGATEWAY_USERNAME",
        "TRAINWATCH_PUSHGATEWAY_PASSWORD", "TRAINWATCH_NODENAME", "TRAINWATCH_GPU_UUIDS",
        "TRAINWATCH_FLOPS_PER_SAMPLE", "TRAINWATCH_PRECISION", "TRAINWATCH_PROFILE_DIR",
        "TRAINWATCH_PROFILE_TRIGGER", "TRAINWATCH_PROFILE_SIGNAL", "TRAINWATCH_PROFILE_STEPS",
        "TRAINWATCH_PROFILE_MAX_MB", "TRAINWATCH_K8S_NAMESPACE", "TRAINWATCH_K8S_POD"}
    assert len(names.TRIAL_ENV) == len(set(names.TRIAL_ENV))
    # Removed, Slurm's, torchrun's and the CLI's variables are not the library's settings.
    for other in (names.ENV_DELETE_ON_EXIT, names.ENV_SLURM_JOB_ID, names.ENV_RANK,
                  names.AUTO_ENV, *names.OTHER_ENV):
        assert other not in names.TRIAL_ENV
    assert names.ENV_DELETE_ON_EXIT in names.REMOVED_ENV
