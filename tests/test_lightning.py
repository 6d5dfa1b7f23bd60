"""The Lightning callback: real Lightning fits on CPU against a real Pushgateway."""

from __future__ import annotations

import argparse
import sys
import time
from types import ModuleType
from typing import Any

import pytest

import trial_instrumentation as ti
from benchmarks.stack import Service, wait_until
from tests.trial_support import EXAMPLES, load_example, pushed, pushed_value, run_example

pl = pytest.importorskip("lightning.pytorch")
from trial_instrumentation import names
from trial_instrumentation.lightning import TrainwatchCallback
from trial_instrumentation.live_keys import KeyInUse

STEPS, EPOCHS, BATCH, DELAY = 12, 2, 4, 0.02
PHASE_COUNT = "trainwatch_trial_phase_seconds_count"


pytestmark = pytest.mark.usefixtures("one_thread")


def example() -> ModuleType:
    return load_example("lightning_train")


def args(pgw: Service, trial: str, **overrides: Any) -> argparse.Namespace:
    return example().parse_args([
        "--steps", str(overrides.get("steps", STEPS)), "--epochs", str(EPOCHS),
        "--batch-size", str(BATCH), "--loader-delay", str(overrides.get("delay", DELAY)),
        "--experiment", "lightning", "--trial", trial, "--pushgateway", pgw.url,
        "--push-interval", "0.1"])


def phases_of(pgw: Service, trial: str) -> dict[str, float]:
    return {dict(labels)["phase"]: value for (name, labels), value in pushed(pgw).items()
            if name == PHASE_COUNT and dict(labels)["trial"] == trial}


def test_fit_pushes_every_phase_once_per_step_and_a_clean_exit_leaves_its_last_step(
        pushgateway: Service) -> None:
    steps = STEPS * EPOCHS
    seen: dict[str, Any] = {}

    class WhileRunning(pl.Callback):  # type: ignore[misc]
        """Reads the gateway after the last step, before the callback's teardown."""

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            def complete() -> dict[tuple[str, str | None], float] | None:
                got = {(n, dict(lbls).get("phase")): v
                       for (n, lbls), v in pushed(pushgateway).items()}
                counts = {phase: v for (n, phase), v in got.items() if n == PHASE_COUNT}
                done = (counts == dict.fromkeys(ti.STANDARD_PHASES, steps)
                        and got.get(("trainwatch_trial_steps_total", None)) == steps)
                return got if done else None
            # Polled until every phase shows every step: a push may fall between two writes.
            seen["all"] = wait_until(complete, what="every phase of every step pushed")
            seen["phases"] = {phase: v for (n, phase), v in seen["all"].items()
                              if n == PHASE_COUNT}
            seen["info"] = [dict(lbls) for (n, lbls) in pushed(pushgateway)
                            if n == "trainwatch_trial_info"]

    module = example()
    run_args = args(pushgateway, "fit")
    trainer = module.make_trainer(run_args, WhileRunning())
    profiler = trainer.profiler
    trainer.fit(module.Classifier(), module.make_loader(run_args))

    assert seen["phases"] == {phase: steps for phase in ti.STANDARD_PHASES}
    values = seen["all"]
    assert values[("trainwatch_trial_step_seconds_count", None)] == steps
    assert values[("trainwatch_trial_samples_total", None)] == steps * BATCH
    # The slow collate is paid by every fetch but the first one (Lightning prefetches it
    # before the loop), and the phases are parts of the steps.
    sums = {phase: values[("trainwatch_trial_phase_seconds_sum", phase)]
            for phase in ti.STANDARD_PHASES}
    assert sums[ti.DATALOADER_NEXT] >= 0.9 * (steps - 1) * DELAY
    assert sum(sums.values()) <= values[("trainwatch_trial_step_seconds_sum", None)]
    assert sums[ti.TRAIN_BATCH] > 0
    assert [(i["rank"], i["world_size"]) for i in seen["info"]] == [("0", "1")]
    # A clean exit leaves its final push, every step in it, and gives the trainer its own
    # profiler back.
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="fit") == steps
    assert pushed_value(pushgateway, names.EXIT, trial="fit", reason=names.EXIT_CLEAN) == 1
    assert trainer.profiler is profiler


def test_a_crash_pushes_the_steps_so_far_and_leaves_the_group(pushgateway: Service) -> None:
    module = example()

    class Diverging(module.Classifier):  # type: ignore[misc,name-defined]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.global_step == 5:
                raise RuntimeError("loss diverged")
            return super().training_step(batch, batch_idx)

    run_args = args(pushgateway, "crash", delay=0.0)
    with pytest.raises(RuntimeError, match="diverged"):
        module.make_trainer(run_args).fit(Diverging(), module.make_loader(run_args))
    # Five finished steps and the one the exception left, as Trial.loader counts it.
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="crash") == 6
    assert phases_of(pushgateway, "crash")[ti.TRAIN_BATCH] == 6
    # Its final push says it failed, never that it ended clean.
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_FAILED) == 1
    assert pushed_value(pushgateway, names.EXIT, trial="crash", reason=names.EXIT_CLEAN) is None


def test_unconfigured_the_callback_leaves_the_trainer_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINWATCH_PUSHGATEWAY", raising=False)
    module = example()
    callback = TrainwatchCallback()
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    profiler = trainer.profiler
    seen = []

    class Probe(pl.Callback):  # type: ignore[misc]
        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            seen.append(trainer.profiler)

    trainer.callbacks.append(Probe())
    run = module.parse_args(["--steps", "2"])
    trainer.fit(module.Classifier(), module.make_loader(run))
    assert seen == [profiler, profiler]


def test_bad_settings_fail_when_the_callback_is_made() -> None:
    with pytest.raises(ValueError, match="push_interval"):
        TrainwatchCallback(experiment="e", trial="t", pushgateway="http://127.0.0.1:1",
                           push_interval=-1)
    with pytest.raises(ValueError, match="from the Trainer"):
        TrainwatchCallback(experiment="e", trial="t", rank=1)


def test_ddp_ranks_push_their_own_groups(pushgateway: Service) -> None:
    steps = 6
    done = run_example([EXAMPLES / "lightning_train.py", "--devices", 2, "--steps", steps,
                        "--batch-size", BATCH, "--pushgateway", pushgateway.url,
                        "--experiment", "ddp", "--trial", "lightning", "--measure-limits",
                        0.2], env={"OMP_NUM_THREADS": "1"}, timeout=180)
    # measure_limits= under 2 ranks: each rank's loader, never a step limit that holds the
    # gradient exchange (scaling efficiency compares with the single-rank one), said once each.
    assert (done.stdout + done.stderr).count("the step's limit is not measured under 2 "
                                             "ranks") == 2
    for rank in ("0", "1"):
        assert pushed_value(pushgateway, names.LOADER_LIMIT, experiment="ddp", rank=rank)
        assert pushed_value(pushgateway, names.STEP_LIMIT, experiment="ddp", rank=rank) is None
        assert pushed_value(pushgateway, "trainwatch_trial_steps_total", experiment="ddp",
                            rank=rank) == steps
        assert pushed_value(pushgateway, "trainwatch_trial_info", experiment="ddp", rank=rank,
                            world_size="2") == 1
        for phase in ti.STANDARD_PHASES:
            assert pushed_value(pushgateway, PHASE_COUNT, experiment="ddp", rank=rank,
                                phase=phase) == steps, (rank, phase)


@pytest.mark.parametrize(("trainer_precision", "published"),
                         [("bf16-mixed", "bf16"), ("32-true", "fp32")])
def test_flops_per_sample_takes_its_precision_from_the_trainer(
        trainer_precision: str, published: str) -> None:
    module = example()
    callback = TrainwatchCallback("e", "flops", pull_port=0, flops_per_sample=1.5e6)
    seen: list[float | None] = []

    class Probe(pl.Callback):  # type: ignore[misc]
        def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
            assert callback.trial is not None
            seen.append(callback.trial.registry.get_sample_value(names.MODEL_FLOPS, {
                "experiment": "e", "trial": "flops", "rank": "0", "precision": published}))

    trainer = pl.Trainer(accelerator="cpu", max_steps=1, callbacks=[callback, Probe()],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, precision=trainer_precision)
    trainer.fit(module.Classifier(), module.make_loader(module.parse_args(["--steps", "1"])))
    assert seen == [1.5e6]


def test_measure_limits_publishes_both_limits_and_training_starts_where_it_would_have(
        pushgateway: Service) -> None:
    module = example()
    run_args = args(pushgateway, "limits", delay=0.05)  # the loader: 4 samples per 50 ms
    run_args.measure_limits = 1.0
    trainer = module.make_trainer(run_args)
    [callback] = [c for c in trainer.callbacks if isinstance(c, TrainwatchCallback)]
    model = module.Classifier()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    at_first_step: dict[str, Any] = {}

    class FirstStep(pl.Callback):  # type: ignore[misc]
        def on_train_batch_start(self, trainer: Any, pl_module: Any, *rest: Any) -> None:
            if not at_first_step:
                at_first_step.update(weights={key: value.clone() for key, value
                                              in pl_module.state_dict().items()},
                                     momentum=len(trainer.optimizers[0].state))

    trainer.callbacks.append(FirstStep())
    fit_called = time.time()
    trainer.fit(model, module.make_loader(run_args))

    assert callback.limits is not None
    loader, step = callback.limits
    assert 0.5 * BATCH / 0.05 <= loader <= 1.01 * BATCH / 0.05
    assert step > loader  # a tiny model, its steps less their fetches
    assert pushed_value(pushgateway, names.LOADER_LIMIT, trial="limits") == loader
    assert pushed_value(pushgateway, names.STEP_LIMIT, trial="limits") == step
    # The loader's second of measuring came before the trial's clock started: no part of its
    # life, so of its steps per second.
    started = pushed_value(pushgateway, "trainwatch_trial_start_time_seconds", trial="limits")
    assert started is not None and started >= fit_called + run_args.measure_limits
    # Nothing trained outside the fit: the model and its optimizer are untouched at the first
    # step, and no step of the trial's is the measurement's.
    assert all(at_first_step["weights"][key].equal(value) for key, value in before.items())
    assert at_first_step["momentum"] == 0
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="limits") == \
        STEPS * EPOCHS
    assert phases_of(pushgateway, "limits")[ti.TRAIN_BATCH] == STEPS * EPOCHS


def test_a_trial_left_open_under_the_callbacks_key_is_refused_naming_both(
        pushgateway: Service) -> None:
    module = example()
    run_args = args(pushgateway, "twice", delay=0.0)
    mine_at = f"{__file__}:{sys._getframe().f_lineno + 1}"
    with ti.Trial("lightning", "twice", pushgateway.url, push_interval=0.1):
        fit_at = f"{__file__}:{sys._getframe().f_lineno + 2}"
        with pytest.raises(KeyInUse) as refused:
            module.make_trainer(run_args).fit(module.Classifier(), module.make_loader(run_args))
    assert (f"trial lightning/twice rank 0 is already live in this process (created at "
            f"{mine_at}); another Trial under the same key (created at {fit_at}, by the "
            "Lightning TrainwatchCallback)") in str(refused.value)
    assert "measure_limits=" in str(refused.value)
    # Closed, the hand-made trial frees the key: the callback's fit pushes all its steps.
    module.make_trainer(run_args).fit(module.Classifier(), module.make_loader(run_args))
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="twice") == \
        STEPS * EPOCHS


def test_the_step_limit_is_the_fits_real_step_its_hooks_and_logging_included(
        pushgateway: Service) -> None:
    # A hook of the fit that costs 30 ms a step: Lightning's own work around training_step,
    # which a bare training_step + backward + optimizer step on a cached batch never sees.
    module = example()
    run_args = args(pushgateway, "real-step", delay=0.0)
    run_args.measure_limits = 0.2
    hook = 0.03

    class SlowHook(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any) -> None:
            time.sleep(hook)

    trainer = module.make_trainer(run_args, SlowHook())
    [callback] = [c for c in trainer.callbacks if isinstance(c, TrainwatchCallback)]
    trainer.fit(module.Classifier(), module.make_loader(run_args))
    assert callback.limits is not None
    _, step = callback.limits
    # At most BATCH per 30 ms (the bare step measured thousands of samples/s), and not far
    # under it: the tiny model's own work is a small part of the step.
    assert 0.6 * BATCH / hook <= step <= BATCH / hook
    assert pushed_value(pushgateway, names.STEP_LIMIT, trial="real-step") == step
