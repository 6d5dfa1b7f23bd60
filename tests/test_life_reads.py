"""An ended run's MFU is read over the part of its life a rate window fills, the same range in
`trials` (trials._life_reads, batched) and `diagnose` (history.life_gpu): one definition,
Run.filled_life_range. A life no longer than the window has no MFU read at all (its rate
record reads low there), one just longer has it, with the offset back to its final push."""

from __future__ import annotations

from typing import Any

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import history, trials
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.runs import Run

DEPLOYMENT = Deployment(RecordNames("5m"), {TRIAL_STALE: AlertRule(TRIAL_STALE, 60.0, "x")})
MFU = RecordNames("5m").mfu


def ended(life: float) -> Run:
    """Started at 1,000 s, pushed last at 1,000 + life, last scraped 37 s after that."""
    return Run("e", "t", "0", "7", "n1", "1", first=1001.0, last=1037.0 + life, started=1000.0,
               pushed=1000.0 + life)


class Reads:
    """Records each expression asked; answers 0.25."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def pinned(self, at: float) -> Reads:
        return self

    def value(self, expr: str, *_: Any) -> float:
        self.asked.append(expr)
        return 0.25


def test_a_life_just_over_the_window_reads_mfu_over_its_filled_part_in_both() -> None:
    run = ended(301.0)
    assert run.filled_life_range("5m") == "[1s] offset 37s"
    assert trials._life_reads(DEPLOYMENT, run)["mfu"] == \
        f"max by (experiment, trial, rank) (avg_over_time({MFU}{{\x00matchers\x00}}[1s] offset 37s))"
    reads = Reads()
    gpu, mfu = history.life_gpu(reads, DEPLOYMENT, run)  # type: ignore[arg-type]
    assert (gpu, mfu) == (0.25, 0.25)
    assert reads.asked[1] == f'avg_over_time({MFU}{{experiment="e", trial="t", rank="0"}}[1s] offset 37s)'


def test_a_life_no_longer_than_the_window_reads_no_mfu_in_either() -> None:
    run = ended(300.0)
    assert run.filled_life_range("5m") is None
    assert "mfu" not in trials._life_reads(DEPLOYMENT, run)
    reads = Reads()
    assert history.life_gpu(reads, DEPLOYMENT, run) == (0.25, None)  # type: ignore[arg-type]
    assert len(reads.asked) == 1 and "[300s] offset 37s" in reads.asked[0]  # GPU busy: its life


def test_a_long_life_reads_all_of_it_but_the_first_window() -> None:
    run = ended(3600.0)
    assert run.filled_life_range("5m") == "[3300s] offset 37s"
    assert run.filled_life_range("1m") == "[3540s] offset 37s"
