"""The Hugging Face callback: real ``Trainer.train()`` runs of a tiny BERT on CPU against a
real Pushgateway."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service, wait_until
from tests.trial_support import EXAMPLES, load_example, pushed, pushed_value, run_example

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from transformers import TrainerCallback

from trial_instrumentation import names
from trial_instrumentation.live_keys import KeyInUse
from trial_instrumentation.transformers import TrainwatchCallback

STEPS, BATCH, DELAY = 16, 4, 0.02
# The phases the Trainer has (docs/instrumentation.md says where the other two are).
HF_PHASES = (ti.DATALOADER_NEXT, ti.TRAIN_BATCH, ti.STEP_LR_SCHEDULERS, ti.REDUCE_METRICS)


pytestmark = pytest.mark.usefixtures("one_thread")


def example() -> ModuleType:
    return load_example("transformers_train")


def args(pgw: Service | None, trial: str, delay: float = DELAY) -> argparse.Namespace:
    gateway = ["--pushgateway", pgw.url] if pgw else []
    return example().parse_args([
        "--steps", str(STEPS), "--batch-size", str(BATCH), "--loader-delay", str(delay),
        "--experiment", "hf", "--trial", trial, "--push-interval", "0.1", *gateway])


def samples(pgw: Service, trial: str) -> dict[tuple[str, str | None], float]:
    return {(name, dict(labels).get("phase")): value
            for (name, labels), value in pushed(pgw).items() if dict(labels)["trial"] == trial}


def test_train_pushes_every_phase_once_per_step_and_a_clean_exit_leaves_its_last_step(
        pushgateway: Service, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    expected = {("trainwatch_trial_phase_seconds_count", phase): STEPS for phase in HF_PHASES}
    expected[("trainwatch_trial_step_seconds_count", None)] = STEPS
    expected[("trainwatch_trial_samples_total", None)] = STEPS * BATCH

    class WhileRunning(TrainerCallback):  # type: ignore[misc]
        """Reads the gateway after the last step (trainwatch ends it at the epoch's end, and
        runs first), before trainwatch's on_train_end makes the final push."""

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            def complete() -> dict[tuple[str, str | None], float] | None:
                got = samples(pushgateway, "train")
                return got if {k: got.get(k) for k in expected} == expected else None
            seen.update(wait_until(complete, what="every step and phase pushed"))

    module = example()
    trainer = module.make_trainer(args(pushgateway, "train"), str(tmp_path))
    trainer.add_callback(WhileRunning())
    loader_class = type(trainer.get_train_dataloader())
    trainer.train()

    phases = {phase for (name, phase) in seen if name == "trainwatch_trial_phase_seconds_count"}
    assert phases == set(HF_PHASES)
    fetched = seen[("trainwatch_trial_phase_seconds_sum", ti.DATALOADER_NEXT)]
    assert fetched >= 0.9 * STEPS * DELAY
    phase_sums = sum(seen[("trainwatch_trial_phase_seconds_sum", p)] for p in HF_PHASES)
    assert phase_sums <= seen[("trainwatch_trial_step_seconds_sum", None)]
    # A clean exit leaves its final push, every step in it, and gives the dataloader its own
    # class back.
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="train") == STEPS
    assert pushed_value(pushgateway, names.EXIT, trial="train", reason=names.EXIT_CLEAN) == 1
    assert type(trainer.callback_handler.train_dataloader) is loader_class


def test_gradient_accumulation_counts_optimizer_steps_and_all_their_samples(
        pushgateway: Service, tmp_path: Path) -> None:
    module = example()
    run_args = args(pushgateway, "accumulate", delay=DELAY)
    trainer = module.make_trainer(run_args, str(tmp_path))
    trainer.args.gradient_accumulation_steps = 2
    trainer.train()
    got = samples(pushgateway, "accumulate")
    steps = trainer.state.global_step
    assert steps == STEPS
    assert got[("trainwatch_trial_steps_total", None)] == steps
    for phase in HF_PHASES:
        assert got[("trainwatch_trial_phase_seconds_count", phase)] == steps, phase
    assert got[("trainwatch_trial_samples_total", None)] == steps * 2 * BATCH
    # Two slow batches per step, fetched before the step begins.
    assert got[("trainwatch_trial_phase_seconds_sum", ti.DATALOADER_NEXT)] >= 0.9 * 2 * steps * DELAY


def test_a_crash_pushes_the_steps_so_far_at_exit_and_leaves_the_group(
        pushgateway: Service, tmp_path: Path) -> None:
    # TrainerCallback has no exception hook: the trial's hook for uncaught exceptions closes it.
    script = textwrap.dedent(f"""
        import sys
        from transformers import TrainerCallback
        sys.path.insert(0, {str(EXAMPLES)!r})
        import transformers_train as example

        class Diverging(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == 3:
                    raise RuntimeError("loss diverged")

        args = example.parse_args(["--steps", "8", "--batch-size", "4", "--experiment", "hf",
                                   "--trial", "crash", "--pushgateway", {pushgateway.url!r},
                                   "--push-interval", "60"])
        trainer = example.make_trainer(args, {str(tmp_path)!r})
        trainer.add_callback(Diverging())
        trainer.train()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO),
                                            "OMP_NUM_THREADS": "1"}, check=False)
    assert done.returncode == 1 and "loss diverged" in done.stderr, done.stderr[-2000:]
    # Pushed at start (push interval 60 s), then the final state as the process dies: two
    # finished steps and the one the exception left (ended by the before-close hook), as
    # Trial.loader counts it.
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="crash") == 3
    assert pushed_value(pushgateway, "trainwatch_trial_phase_seconds_count", trial="crash",
                        phase=ti.TRAIN_BATCH) == 3
    # Its final push says it failed, never that it ended clean.
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_FAILED) == 1
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_CLEAN) is None


def test_unconfigured_the_callback_leaves_the_dataloader_alone(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRAINWATCH_PUSHGATEWAY", raising=False)
    module = example()
    kinds = []

    class Probe(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            kinds.append(type(kwargs["train_dataloader"]).__dict__.get("_trainwatch_original"))

    run_args = args(None, "off", delay=0.0)
    run_args.steps = 2
    trainer = module.make_trainer(run_args, str(tmp_path))
    trainer.add_callback(Probe())
    trainer.train()
    assert kinds == [None, None]


def test_bad_settings_fail_when_the_callback_is_made() -> None:
    with pytest.raises(ValueError, match="push_interval"):
        TrainwatchCallback(experiment="e", trial="t", pushgateway="http://127.0.0.1:1",
                           push_interval=0)
    with pytest.raises(ValueError, match="from TrainingArguments"):
        TrainwatchCallback(experiment="e", trial="t", world_size=2)


def test_torchrun_ranks_push_their_own_groups(pushgateway: Service) -> None:
    steps = 5
    run_example([EXAMPLES / "transformers_train.py", "--steps", steps, "--batch-size", BATCH,
                 "--pushgateway", pushgateway.url, "--experiment", "ddp", "--trial", "hf"], env={"OMP_NUM_THREADS": "1"}, torchrun=True, timeout=180)
    for rank in ("0", "1"):
        assert pushed_value(pushgateway, "trainwatch_trial_steps_total", experiment="ddp",
                            rank=rank) == steps
        assert pushed_value(pushgateway, "trainwatch_trial_info", experiment="ddp", rank=rank,
                            world_size="2") == 1
        for phase in HF_PHASES:
            assert pushed_value(pushgateway, "trainwatch_trial_phase_seconds_count",
                                experiment="ddp", rank=rank, phase=phase) == steps, (rank, phase)


def test_measure_limits_publishes_both_limits_and_training_starts_where_it_would_have(
        pushgateway: Service, tmp_path: Path) -> None:
    module = example()
    run_args = args(pushgateway, "limits", delay=0.05)  # the loader: 4 samples per 50 ms
    run_args.measure_limits = 1.0
    run_args.steps = 4
    trainer = module.make_trainer(run_args, str(tmp_path))
    [callback] = [c for c in trainer.callback_handler.callbacks
                  if isinstance(c, TrainwatchCallback)]
    before = {key: value.clone() for key, value in trainer.model.state_dict().items()}
    at_first_step: dict[str, Any] = {}

    class FirstStep(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not at_first_step:
                at_first_step.update(weights={key: value.clone() for key, value
                                              in kwargs["model"].state_dict().items()},
                                     moments=len(kwargs["optimizer"].state))

    trainer.add_callback(FirstStep())
    train_called = time.time()
    trainer.train()

    assert callback.limits is not None
    loader, step = callback.limits
    assert 0.5 * BATCH / 0.05 <= loader <= 1.01 * BATCH / 0.05
    assert step > 0
    assert pushed_value(pushgateway, names.LOADER_LIMIT, trial="limits") == loader
    assert pushed_value(pushgateway, names.STEP_LIMIT, trial="limits") == step
    # The loader's second of measuring came before the trial's clock started: no part of its
    # life, so of its steps per second.
    started = pushed_value(pushgateway, "trainwatch_trial_start_time_seconds", trial="limits")
    assert started is not None and started >= train_called + run_args.measure_limits
    # The step is measured over the Trainer's own steps: nothing trained outside them, the
    # model and AdamW's moments are untouched at the first step.
    assert all(at_first_step["weights"][key].equal(value) for key, value in before.items())
    assert at_first_step["moments"] == 0
    got = samples(pushgateway, "limits")
    assert got[("trainwatch_trial_steps_total", None)] == 4
    assert got[("trainwatch_trial_phase_seconds_count", ti.DATALOADER_NEXT)] == 4


def test_a_trial_left_open_under_the_callbacks_key_is_refused_naming_both(
        pushgateway: Service, tmp_path: Path) -> None:
    module = example()
    trainer = module.make_trainer(args(pushgateway, "twice", delay=0.0), str(tmp_path))
    with ti.Trial("hf", "twice", pushgateway.url, push_interval=0.1), \
            pytest.raises(KeyInUse, match=r"trial hf/twice rank 0 is already live in this "
                                          rf"process \(created at {re.escape(__file__)}:\d+\); "
                                          r"another Trial under the same key \(created at "
                                          rf"{re.escape(__file__)}:\d+, by the Hugging Face "
                                          r"TrainwatchCallback\)"):
        trainer.train()


def test_measure_limits_must_be_seconds_above_zero() -> None:
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match=r"argument measure_limits=: invalid value"):
            TrainwatchCallback(experiment="e", trial="t", measure_limits=bad)
