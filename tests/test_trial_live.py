"""The examples against a real Pushgateway scraped by a real Prometheus (honor_labels), and
the group lifecycle: every exit leaves the group, a clean or failed one with its final push."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service, scrape_config, start_prometheus, wait_until
from tests.trial_support import EXAMPLES, cpu_loop, pushed_value, run_example
from trial_instrumentation import names

STEPS = "trainwatch_trial_steps_total"
# rank -> (steps, batch size, loader delay, workers): rank 0 starves on data, rank 1 does not.
# Rank 1 runs 3,000 sub-millisecond steps (about 0.5 s of step time): at 30 steps its whole
# step time was 10-25 ms, so one scheduler stall of tens of ms inside a fetch, with rank 0 and
# Prometheus on the same 2 cores, read as a 0.74 loader share in a clean-clone run.
RANKS = {"0": (12, 8, 0.1, 1), "1": (3000, 5, 0.0, 0)}
# One intra-op thread: on a small shared machine two OpenMP threads per process turn a
# sub-millisecond step into 100 ms stalls, and the test is about the loader, not OpenMP.
ENV = {"WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}


def example_args(pgw: Service, steps: int, batch: int, delay: float,
                 workers: int) -> list[object]:
    return [EXAMPLES / "pytorch_loop.py", "--steps", steps, "--batch-size", batch,
            "--loader-delay", delay, "--workers", workers, "--experiment", "live",
            "--trial", "t1", "--pushgateway", pgw.url, "--push-interval", "0.5"]


def test_example_loop_seen_by_prometheus(tmp_path: Path, pushgateway: Service) -> None:
    config = {"scrape_configs": [scrape_config("pushgateway", pushgateway.url,
                                               honor_labels=True)]}
    with start_prometheus(tmp_path, config) as prom, ThreadPoolExecutor(2) as pool:
        # Two ranks of one trial at once: the grouping key must keep them apart.
        runs = [pool.submit(run_example, example_args(pushgateway, *spec), {**ENV, "RANK": rank})
                for rank, spec in RANKS.items()]
        for run in runs:
            run.result()
        done = " or ".join(f'{STEPS}{{rank="{r}"}} == {s}' for r, (s, *_) in RANKS.items())
        wait_until(lambda: len(prom.query(done)) == 2, timeout=30, what="both ranks scraped")

        def value(expr: str) -> dict[str, float]:
            return {s["metric"]["rank"]: float(s["value"][1]) for s in prom.query(expr)}

        sel = 'job="trainwatch_trial",experiment="live",trial="t1"'
        for rank, (steps, batch, *_) in RANKS.items():
            counts = value(f'trainwatch_trial_phase_seconds_count{{{sel},rank="{rank}"}}')
            assert len(counts) == 1
            for phase in ti.STANDARD_PHASES:
                series = prom.query(f'trainwatch_trial_phase_seconds_count{{{sel},'
                                    f'rank="{rank}",phase="{phase}"}}')
                assert [float(s["value"][1]) for s in series] == [steps], (rank, phase)
            assert value(f'trainwatch_trial_step_seconds_count{{{sel},rank="{rank}"}}') \
                == {rank: steps}
            assert value(f'{STEPS}{{{sel},rank="{rank}"}}') == {rank: steps}
            assert value(f'trainwatch_trial_samples_total{{{sel},rank="{rank}"}}') \
                == {rank: steps * batch}
        share = value(f'trainwatch_trial_phase_seconds_sum{{{sel},phase="dataloader_next"}} '
                      f'/ ignoring(phase) trainwatch_trial_step_seconds_sum{{{sel}}}')
        assert share["0"] > 0.5, share
        # The ranks apart by what does not bend under load: rank 0's loader sleeps 0.1 s a
        # batch (a floor), rank 1 makes its small batches in-process. A loaded machine lifted
        # rank 1's share to 0.71-0.78 (preempted sub-millisecond steps), not its mean fetch.
        fetch = value(f'trainwatch_trial_phase_seconds_sum{{{sel},phase="dataloader_next"}} '
                      f'/ trainwatch_trial_phase_seconds_count{{{sel},phase="dataloader_next"}}')
        assert fetch["0"] >= 0.1 and fetch["1"] < 0.05, fetch
        info = prom.query(f'trainwatch_trial_info{{{sel}}}')
        assert {s["metric"]["rank"] for s in info} == {"0", "1"}
        for sample in info:  # joins to the exporter on nodename; no instance label pushed
            labels = sample["metric"]
            assert labels["nodename"] == os.uname().nodename and labels["world_size"] == "2"
            assert "instance" not in labels


def test_ddp_gloo_ranks_push_their_own_groups(pushgateway: Service) -> None:
    run_example([EXAMPLES / "ddp_gloo.py", "--steps", "6", "--workers", "0",
                 "--pushgateway", pushgateway.url, "--experiment", "ddp", "--trial", "t"],
                torchrun=True)
    for rank in ("0", "1"):
        assert pushed_value(pushgateway, STEPS, experiment="ddp", rank=rank) == 6
        assert pushed_value(pushgateway, "trainwatch_trial_phase_seconds_count",
                            experiment="ddp", rank=rank, phase=ti.REDUCE_METRICS) == 6
        assert pushed_value(pushgateway, "trainwatch_trial_info", experiment="ddp",
                            rank=rank, world_size="2") == 1


def make_trial(pgw: Service, name: str) -> ti.Trial:
    return ti.Trial(experiment="exit", trial=name, pushgateway=pgw.url, push_interval=0.1)


def test_clean_exit_leaves_its_final_state_marked_clean(pushgateway: Service) -> None:
    with make_trial(pushgateway, "clean") as trial:
        cpu_loop(trial, 5)
    # No wait: the final push finished inside __exit__, and nothing deleted it after.
    assert pushed_value(pushgateway, STEPS, trial="clean") == 5
    assert pushed_value(pushgateway, names.EXIT, trial="clean", reason=names.EXIT_CLEAN) == 1
    assert pushed_value(pushgateway, names.EXIT, trial="clean", reason=names.EXIT_FAILED) is None


def test_exception_pushes_final_state_and_leaves_the_group(pushgateway: Service) -> None:
    with pytest.raises(RuntimeError, match="diverged"), make_trial(pushgateway, "crash") as trial:
        cpu_loop(trial, 3)
        raise RuntimeError("loss diverged")
    # No wait: the final push finished inside __exit__, marked failed and not clean.
    assert pushed_value(pushgateway, STEPS, trial="crash") == 3
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_FAILED) == 1
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_CLEAN) is None


@pytest.mark.parametrize(("code", "reason"), [(0, names.EXIT_CLEAN), (None, names.EXIT_CLEAN),
                                              (2, names.EXIT_FAILED)])
def test_sys_exit_is_clean_only_with_a_success_status(pushgateway: Service, code: int | None,
                                                      reason: str) -> None:
    name = f"exit-{code}"
    with pytest.raises(SystemExit), make_trial(pushgateway, name) as trial:
        cpu_loop(trial, 2)
        sys.exit(code)
    assert pushed_value(pushgateway, STEPS, trial=name) == 2
    assert [r for r in (names.EXIT_CLEAN, names.EXIT_FAILED)
            if pushed_value(pushgateway, names.EXIT, trial=name, reason=r)] == [reason]


def test_sigkilled_trial_leaves_its_group(pushgateway: Service) -> None:
    script = textwrap.dedent(f"""
        import itertools, time
        import trial_instrumentation as ti
        with ti.Trial(experiment="exit", trial="killed", pushgateway={pushgateway.url!r},
                      push_interval=0.1) as trial:
            for _ in trial.loader(itertools.count(), samples=1):
                time.sleep(0.005)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_until(lambda: (pushed_value(pushgateway, STEPS, trial="killed") or 0) >= 3,
                   what="the killed trial's pushes")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (pushed_value(pushgateway, STEPS, trial="killed") or 0) >= 3
