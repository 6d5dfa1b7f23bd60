"""trainwatch/contract/records.py: the recorded series' names, without a stack."""

from __future__ import annotations

import re

import pytest

from benchmarks.stack import REPO
from tests.frozen import assert_frozen
from trainwatch.contract.records import IDLE_CAUSES, USAGE_GROUPS, RecordNames

SHARE = "trial_phase:trainwatch_trial_phase_seconds:share_rate"


def test_discover_takes_the_first_sorted_window_of_the_loaded_share_rules() -> None:
    loaded = [f"{SHARE}5m", "up", f"{SHARE}30s", RecordNames("1m").steps_rate]
    assert RecordNames.discover(loaded) == RecordNames("30s")
    assert RecordNames.discover(iter([f"{SHARE}5m"])) == RecordNames("5m")


def test_discover_needs_a_window_after_the_share_prefix() -> None:
    assert RecordNames.discover([SHARE]) is None
    assert RecordNames.discover([SHARE, f"{SHARE}2m"]) == RecordNames("2m")
    assert RecordNames.discover([f"x{SHARE}5m", f"{SHARE[:-1]}5m"]) is None
    assert RecordNames.discover([]) is None


def test_rolled_and_fleet_keep_the_metric_and_operations_and_refuse_other_levels() -> None:
    held = RecordNames("5m").gpu_seconds_held
    assert RecordNames.rolled(held) == "trial_node:trainwatch_trial_gpu_held:seconds_1m"
    assert RecordNames.rolled("trial:a:b:c") == "trial_node:a:b:c"
    assert RecordNames.fleet("trial:a:b:c") == "fleet:a:b:c"
    for other in ("gpu:trainwatch_gpu_unused:seconds_1m", "trial_node:a:b", "trials:a:b"):
        with pytest.raises(ValueError, match="is not a per-rank record"):
            RecordNames.rolled(other)
        with pytest.raises(ValueError):
            RecordNames.fleet(other)


def test_the_per_rank_gpu_seconds_records_are_the_six_rolled_up() -> None:
    n = RecordNames("10s")
    assert n.gpu_seconds_per_rank == (
        "trial:trainwatch_trial_gpu_held:seconds_1m", "trial:trainwatch_trial_gpu_busy:seconds_1m",
        "trial:trainwatch_trial_gpu_idle:seconds_1m",
        "trial:trainwatch_trial_gpu_busy_low_mfu:seconds_1m",
        "trial:trainwatch_trial_gpu_held_mfu_known:seconds_1m",
        "trial:trainwatch_trial_gpu_model:seconds_1m")
    assert n.device_rate("disk_read_bytes") == "instance_device:trainwatch_disk_read_bytes:rate10s"
    assert n.cpu_utilization == "instance:trainwatch_cpu_utilization:ratio_rate10s"


def test_record_names_are_frozen_values() -> None:
    assert_frozen(RecordNames("5m"))
    assert RecordNames("5m") == RecordNames("5m") and RecordNames("5m") != RecordNames("1m")


def test_the_usage_groupings_are_the_words_the_readme_offers() -> None:
    (line,) = [line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith("trainwatch usage ") and "--by namespace" in line]
    comment = re.sub(r"\([^)]*\)", "", line.split("#", 1)[1]).removeprefix(" or ")
    assert set(USAGE_GROUPS) == {"namespace", *(w.strip() for w in comment.split(","))}


def test_the_idle_causes_say_the_words_design_md_gives_them() -> None:
    (row,) = [line for line in (REPO / "docs" / "design.md").read_text().splitlines()
              if line.startswith("| `trial:trainwatch_trial_gpu_idle:seconds_1m` |")]
    listed = re.findall(r'`([a-z_]+)` \((?:"([^"]+)"|[^"])', row.split("`cause` is one of", 1)[1])
    # A cause the table quotes no words for is said by its own name.
    assert IDLE_CAUSES == {cause: words or cause for cause, words in listed}
