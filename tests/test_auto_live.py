"""`trainwatch run` and TRAINWATCH_AUTO (issue 39) against a real stack: unmodified scripts
(tests/auto_scripts/) pushed to a real Pushgateway and scraped by a real Prometheus; each
count is Prometheus's last sample, compared with what the script itself says it ran."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.stack import REPO
from tests.live_stack import LiveStack, live_stack
from trial_instrumentation import names
from trial_instrumentation.auto.naming import script_name

pytest.importorskip("torch")
SCRIPTS = REPO / "tests" / "auto_scripts"
BIN = Path(sys.executable).parent
TRAINWATCH = BIN / "trainwatch"
SITE = REPO / "trial_instrumentation" / "auto" / "site"
EXPERIMENT = "auto-live"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with live_stack(tmp_path_factory.mktemp("auto"), rate_window="10s", for_="3s") as live:
        yield live


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINWATCH_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
            "TRAINWATCH_PUSH_INTERVAL": "0.5", **extra}


def trainwatch_run(stack: LiveStack, trial: str, *command: object,
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``trainwatch run --experiment auto-live --trial TRIAL -- COMMAND``; must exit 0."""
    argv = [str(TRAINWATCH), "run", "--experiment", EXPERIMENT, "--trial", trial,
            "--pushgateway", stack.pushgateway.url, "--", *map(str, command)]
    done = subprocess.run(argv, env=base_env(), capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=stack.workdir)
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def python(script: str, *args: object) -> list[object]:
    return [sys.executable, SCRIPTS / script, *args]


def last(stack: LiveStack, metric: str, trial: str, rank: int = 0, value: float | None = None,
         timeout: float = 20, **labels: str) -> float:
    """Prometheus's latest sample of ``metric`` for the trial's rank (once it equals ``value``,
    when given: the final push may land a scrape after the process exited)."""
    more = "".join(f', {k}="{v}"' for k, v in labels.items())
    expr = f'{metric}{{experiment="{EXPERIMENT}", trial="{trial}", rank="{rank}"{more}}}'
    if value is not None:
        with contextlib.suppress(TimeoutError):  # the assertion says what it was instead
            stack.prometheus.wait_for_series(f"{expr} == {value}", timeout)
    [series] = stack.prometheus.wait_for_series(expr, timeout)
    return float(series["value"][1])


def said(done: subprocess.CompletedProcess[str], prefix: str) -> int:
    found = re.search(rf"{re.escape(prefix)} (\d+)", done.stdout)
    assert found, f"no {prefix!r} in the script's output: {done.stdout[-2000:]}"
    return int(found[1])


def warnings(stderr: str) -> list[str]:
    """trainwatch's lines other than the two that say what is timed and where."""
    return [line for line in stderr.splitlines() if line.startswith("trainwatch")
            and not line.startswith(("trainwatch run: experiment", "trainwatch: timing"))]


def ended_clean(stack: LiveStack, trial: str, rank: int = 0) -> bool:
    return last(stack, names.EXIT, trial, rank, reason=names.EXIT_CLEAN) == 1


def test_a_plain_loop_counts_its_optimizer_steps_and_samples(stack: LiveStack) -> None:
    done = trainwatch_run(stack, "plain", *python("plain_loop.py", "--steps", "30"))
    steps = said(done, "optimizer steps")
    assert steps == 30
    assert last(stack, "trainwatch_trial_steps_total", "plain", value=steps) == steps
    assert last(stack, "trainwatch_trial_samples_total", "plain") == steps * 8
    for phase in (names.DATALOADER_NEXT, names.TRAIN_BATCH):
        count = last(stack, "trainwatch_trial_phase_seconds_count", "plain", phase=phase)
        assert count == steps, phase
    assert ended_clean(stack, "plain")
    assert warnings(done.stderr) == [], done.stderr
    assert f"experiment {EXPERIMENT}, trial plain, rank 0 of 1" in done.stderr


def test_gradient_accumulation_counts_optimizer_steps_not_batches(stack: LiveStack) -> None:
    done = trainwatch_run(stack, "accumulate",
                          *python("plain_loop.py", "--steps", "20", "--accumulate", "3"))
    assert said(done, "optimizer steps") == 20
    assert last(stack, "trainwatch_trial_steps_total", "accumulate", value=20) == 20
    # Every batch's samples, three batches a step; every fetch timed.
    assert last(stack, "trainwatch_trial_samples_total", "accumulate") == 20 * 3 * 8
    assert last(stack, "trainwatch_trial_phase_seconds_count", "accumulate",
                phase=names.DATALOADER_NEXT) == 20
    assert warnings(done.stderr) == [], done.stderr


def test_the_environment_alone_turns_it_on(stack: LiveStack) -> None:
    env = base_env(TRAINWATCH_AUTO="1", PYTHONPATH=f"{SITE}{os.pathsep}{REPO}",
                   TRAINWATCH_PUSHGATEWAY=stack.pushgateway.url,
                   TRAINWATCH_EXPERIMENT=EXPERIMENT, TRAINWATCH_TRIAL="env-only")
    done = subprocess.run(python("plain_loop.py", "--steps", "25"), env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    assert last(stack, "trainwatch_trial_steps_total", "env-only", value=25) == 25
    assert ended_clean(stack, "env-only")
    assert warnings(done.stderr) == [], done.stderr
    # Without TRAINWATCH_AUTO the same environment loads nothing of trainwatch.
    del env["TRAINWATCH_AUTO"]
    env["TRAINWATCH_TRIAL"] = "env-off"
    done = subprocess.run(python("no_torch.py"), env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout == "sum 45 modules []\n" and done.stderr == ""


def test_two_torchrun_ranks_each_count_their_steps(stack: LiveStack) -> None:
    done = trainwatch_run(stack, "ddp", BIN / "torchrun", "--standalone", "--nproc-per-node",
                          "2", SCRIPTS / "ddp_loop.py", "15", timeout=180)
    for rank in (0, 1):
        assert f"rank {rank} optimizer steps 15" in done.stdout
        assert last(stack, "trainwatch_trial_steps_total", "ddp", rank, value=15) == 15
        assert ended_clean(stack, "ddp", rank)
    [info] = stack.prometheus.query(f'count({names.TRIAL_INFO}{{trial="ddp"}})')
    assert info["value"][1] == "2"  # the two ranks, not torchrun's launcher
    assert warnings(done.stderr) == [], done.stderr


def test_lightning_gets_trainwatchs_callback_once(stack: LiveStack) -> None:
    pytest.importorskip("lightning")
    done = trainwatch_run(stack, "lightning", *python("lightning_loop.py", "12"), timeout=180)
    assert said(done, "rank 0 optimizer steps") == 12
    assert last(stack, "trainwatch_trial_steps_total", "lightning", value=12) == 12
    assert "timing Lightning's Trainer with trainwatch's callback" in done.stderr
    assert ended_clean(stack, "lightning")


def test_lightnings_own_ddp_launcher_times_each_rank(stack: LiveStack) -> None:
    pytest.importorskip("lightning")
    done = trainwatch_run(stack, "lightning-ddp", *python("lightning_loop.py", "10", "2"),
                          timeout=240)
    for rank in (0, 1):
        assert said(done, f"rank {rank} optimizer steps") == 10
        assert last(stack, "trainwatch_trial_steps_total", "lightning-ddp", rank, value=10) == 10
        assert ended_clean(stack, "lightning-ddp", rank)
    [info] = stack.prometheus.query(f'count({names.TRIAL_INFO}{{trial="lightning-ddp"}})')
    assert info["value"][1] == "2"


def test_the_hugging_face_trainer_gets_trainwatchs_callback_once(stack: LiveStack) -> None:
    pytest.importorskip("transformers")
    done = trainwatch_run(stack, "hf", *python("hf_trainer.py", "10"), timeout=240)
    assert said(done, "optimizer steps") == 10
    assert last(stack, "trainwatch_trial_steps_total", "hf", value=10) == 10
    assert last(stack, "trainwatch_trial_samples_total", "hf") == 80
    assert "timing the Hugging Face Trainer with trainwatch's callback" in done.stderr
    assert ended_clean(stack, "hf")


def test_a_script_without_torch_runs_unchanged(stack: LiveStack) -> None:
    done = trainwatch_run(stack, "no-torch", *python("no_torch.py"))
    assert done.stdout == "sum 45 modules []\n"
    assert warnings(done.stderr) == []
    assert stack.prometheus.query(f'{names.TRIAL_INFO}{{trial="no-torch"}}') == []


def test_a_loop_without_an_optimizer_counts_fetched_batches_and_says_so(
        stack: LiveStack) -> None:
    done = trainwatch_run(stack, "no-optimizer",
                          *python("plain_loop.py", "--steps", "40", "--no-optimizer"))
    assert last(stack, "trainwatch_trial_steps_total", "no-optimizer", value=40) == 40
    assert last(stack, "trainwatch_trial_samples_total", "no-optimizer") == 40 * 8
    [warning] = warnings(done.stderr)
    assert "counting one step per fetched batch" in warning
    # As it says, train_batch is not timed: no step of it, though every batch was a step.
    timed = stack.prometheus.query(f'trainwatch_trial_phase_seconds_count{{trial="no-optimizer", '
                                   f'phase="{names.TRAIN_BATCH}"}} > 0')
    assert timed == [], timed
    assert ended_clean(stack, "no-optimizer")


def test_an_explicit_trial_in_the_script_wins(stack: LiveStack) -> None:
    done = trainwatch_run(stack, "explicit", *python("plain_loop.py", "--steps", "30",
                                                     "--explicit"))
    assert said(done, "optimizer steps") == 30
    # Counted once: the script's own loader, not auto's hooks as well.
    assert last(stack, "trainwatch_trial_steps_total", "explicit", value=30) == 30
    assert last(stack, "trainwatch_trial_phase_seconds_count", "explicit",
                phase=names.DATALOADER_NEXT) == 30
    assert "trainwatch: timing" not in done.stderr
    assert warnings(done.stderr) == [], done.stderr


def diagnose(stack: LiveStack, trial: str) -> dict[str, object]:
    done = subprocess.run([str(TRAINWATCH), "diagnose", "--experiment", EXPERIMENT, "--trial",
                           trial, "--prometheus", stack.prometheus.url, "--format", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    [report] = json.loads(done.stdout)["reports"]
    return report


def twins(stack: LiveStack, name: str, *args: str) -> dict[str, tuple[str, float]]:
    """The script run by trainwatch run (trial NAME) beside its explicitly instrumented twin
    (NAME-twin), at once; each one's diagnose finding and loader share once both ended."""
    twin = subprocess.Popen([*map(str, python("plain_loop.py", *args, "--explicit"))],
                            env=base_env(TRAINWATCH_PUSHGATEWAY=stack.pushgateway.url,
                                         TRAINWATCH_EXPERIMENT=EXPERIMENT,
                                         TRAINWATCH_TRIAL=f"{name}-twin"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trainwatch_run(stack, name, *python("plain_loop.py", *args))
    out, err = twin.communicate(timeout=60)
    assert twin.returncode == 0, err
    steps = said(subprocess.CompletedProcess([], 0, out, err), "optimizer steps")
    assert last(stack, "trainwatch_trial_steps_total", f"{name}-twin", value=steps) == steps
    found = {}
    for trial in (name, f"{name}-twin"):
        report = diagnose(stack, trial)
        share = next(p["share"] for p in report["phases"]  # type: ignore[attr-defined]
                     if p["phase"] == names.DATALOADER_NEXT)
        verdict = report["verdict"]
        found[trial] = (verdict.get("finding") or verdict["kind"], share)  # type: ignore
    print(name, found)
    return found


def test_a_loader_bound_script_gets_its_instrumented_twins_verdict(stack: LiveStack) -> None:
    found = twins(stack, "slow", "--steps", "20", "--loader-delay", "0.05", "--seconds", "12")
    (finding, share), (twin_finding, twin_share) = found.values()
    assert finding == twin_finding == "dataloader", found
    assert share == pytest.approx(twin_share, abs=0.03), found


def test_a_healthy_script_stays_healthy_as_its_twin_does(stack: LiveStack) -> None:
    found = twins(stack, "healthy", "--steps", "50", "--step-cpu", "0.004", "--seconds", "10")
    (finding, share), (twin_finding, twin_share) = found.values()
    assert finding == twin_finding != "dataloader", found
    assert share == pytest.approx(twin_share, abs=0.03), found


def test_names_come_from_the_script_when_nothing_names_them() -> None:
    assert script_name(["torchrun", "--standalone", "/x/train.py", "--lr", "1"]) == "train"
    assert script_name(["python", "-m", "pkg.train"]) == "pkg.train"
