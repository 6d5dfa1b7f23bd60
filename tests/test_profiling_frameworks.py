"""A profiler capture of N steps during Lightning's fit() and the Hugging Face Trainer's
train(): their step boundaries come from the shared step timer (trial_instrumentation.framework),
so a request (here the signal, sent from inside the run) records exactly N of their steps."""

from __future__ import annotations

import gzip
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import Service
from tests.trial_support import load_example
from trial_instrumentation import names

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS = 3


# The loss's backward, once in each training step of both frameworks' examples (NLL).
LOSS_BACKWARD = "autograd::engine::evaluate_function: NllLossBackward0"


def recorded_steps(folder: Path) -> tuple[list[str], set[str]]:
    """The capture's ProfilerStep names and every event name; each ProfilerStep is checked to
    be one training step: the loss's backward ran as many times as there are ProfilerSteps."""
    (path,) = folder.rglob("*.pt.trace.json.gz")
    with gzip.open(path, "rt") as file:
        events = json.load(file)["traceEvents"]
    names_seen = {str(e.get("name", "")) for e in events}
    steps = sorted(n for n in names_seen if n.startswith("ProfilerStep#"))
    backwards = sum(e.get("name") == LOSS_BACKWARD for e in events)
    assert backwards == len(steps), (backwards, steps)
    return steps, names_seen


@pytest.fixture
def traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path / "traces"))
    monkeypatch.setenv(names.ENV_PROFILE_STEPS, str(STEPS))
    return tmp_path / "traces"


def test_a_capture_during_lightning_fit(pushgateway: Service, traces: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    module = load_example("lightning_train")

    class AskAtBatchOne(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == 1:
                os.kill(os.getpid(), signal.SIGUSR2)

    run_args = module.parse_args([
        "--steps", "12", "--epochs", "1", "--batch-size", "4", "--loader-delay", "0",
        "--experiment", "prof-fw", "--trial", "lightning", "--pushgateway", pushgateway.url,
        "--push-interval", "0.1"])
    trainer = module.make_trainer(run_args, AskAtBatchOne())
    trainer.fit(module.Classifier(), module.make_loader(run_args))
    steps, seen = recorded_steps(traces)
    assert len(steps) == STEPS, steps
    assert {"aten::addmm", "aten::mm"} & seen


def test_a_capture_during_hugging_face_train(pushgateway: Service, traces: Path,
                                             tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    module = load_example("transformers_train")

    class AskAtStepOne(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGUSR2)

    run_args = module.parse_args([
        "--steps", "12", "--batch-size", "4", "--loader-delay", "0", "--experiment", "prof-fw",
        "--trial", "hf", "--push-interval", "0.1", "--pushgateway", pushgateway.url])
    trainer = module.make_trainer(run_args, str(tmp_path / "out"))
    trainer.add_callback(AskAtStepOne())
    trainer.train()
    steps, seen = recorded_steps(traces)
    assert len(steps) == STEPS, steps
    assert {"aten::addmm", "aten::mm"} & seen
