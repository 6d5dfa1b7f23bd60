"""Lightning's and the Hugging Face Trainer under automatic instrumentation
(trial_instrumentation/auto/frameworks.py), in process: each new trainer gets trainwatch's
callback with the names nobody else gives, auto stands aside, one line says so; a trainer with
its own callback, an auto that is not ready or is off, and a failure are left alone.

The two callback modules are stand-ins (importing Lightning and transformers takes seconds):
the unit here is which callback class is used, with what names, and where it is put."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import pytest

from trial_instrumentation.auto import _Auto, frameworks


class _Callback:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class LightningCallback(_Callback):
    pass


class TransformersCallback(_Callback):
    pass


@pytest.fixture(autouse=True)
def callbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, cls in (("lightning", LightningCallback), ("transformers", TransformersCallback)):
        module = types.ModuleType(f"trial_instrumentation.{name}")
        module.TrainwatchCallback = cls  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, f"trial_instrumentation.{name}", module)
    for variable in ("TRAINWATCH_EXPERIMENT", "TRAINWATCH_TRIAL", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("SLURM_JOB_NAME", "bert")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setattr(sys, "argv", ["train.py"])


def ready() -> _Auto:
    auto = _Auto()
    auto.ready = True
    return auto


def lightning_trainer(auto: _Auto) -> type:
    class Trainer:
        def __init__(self, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs
            self.callbacks = list(callbacks or [])

    frameworks.patch(Trainer, "lightning", auto)
    return Trainer


def transformers_trainer(auto: _Auto) -> type:
    class Trainer:
        def __init__(self, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs
            self.callback_handler = types.SimpleNamespace(callbacks=list(callbacks or []))
            self.added: list[Any] = []

        def add_callback(self, callback: Any) -> None:
            self.added.append(callback)

    frameworks.patch(Trainer, "transformers", auto)
    return Trainer


def test_a_lightning_trainer_gets_the_lightning_callback_named_by_the_scheduler(
        capsys: pytest.CaptureFixture[str]) -> None:
    auto = ready()
    trainer = lightning_trainer(auto)(1, "two", max_epochs=3)
    assert (trainer.args, trainer.kwargs) == ((1, "two"), {"max_epochs": 3})
    [callback] = trainer.callbacks
    assert type(callback) is LightningCallback
    assert callback.kwargs == {"experiment": "bert", "trial": "4242"}
    assert auto.off
    assert capsys.readouterr().err == (
        "trainwatch: timing Lightning's Trainer with trainwatch's callback as experiment bert, "
        "trial 4242 (names from Slurm, Slurm)\n")


def test_a_hugging_face_trainer_gets_its_callback_through_add_callback(
        capsys: pytest.CaptureFixture[str]) -> None:
    auto = ready()
    trainer = transformers_trainer(auto)(model="m")
    assert trainer.kwargs == {"model": "m"}
    [callback] = trainer.added
    assert type(callback) is TransformersCallback
    assert callback.kwargs == {"experiment": "bert", "trial": "4242"}
    assert trainer.callback_handler.callbacks == []  # through add_callback, not appended
    assert auto.off
    assert capsys.readouterr().err == (
        "trainwatch: timing the Hugging Face Trainer with trainwatch's callback as experiment "
        "bert, trial 4242 (names from Slurm, Slurm)\n")


def test_names_set_for_trainwatch_are_left_to_the_callback_and_shown(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "mine")
    [callback] = lightning_trainer(ready())().callbacks
    assert callback.kwargs == {"experiment": None, "trial": "4242"}
    assert "as experiment mine, trial 4242 (" in capsys.readouterr().err
    monkeypatch.delenv("TRAINWATCH_EXPERIMENT")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "t-9")
    [callback] = transformers_trainer(ready())().added
    assert callback.kwargs == {"experiment": "bert", "trial": None}
    assert "as experiment bert, trial t-9 (" in capsys.readouterr().err
    monkeypatch.setenv("TRAINWATCH_TRIAL", "")  # set but empty: ours
    [callback] = lightning_trainer(ready())().callbacks
    assert callback.kwargs == {"experiment": "bert", "trial": "4242"}


def test_a_trainer_with_its_own_callback_is_left_as_it_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    auto = ready()
    own = LightningCallback(experiment="x")
    trainer = lightning_trainer(auto)(callbacks=[object(), own])
    assert trainer.callbacks[1] is own and len(trainer.callbacks) == 2
    auto_hf = ready()
    hf = transformers_trainer(auto_hf)(callbacks=[TransformersCallback()])
    assert hf.added == []
    assert not auto.off and not auto_hf.off  # the generic hooks still time
    assert capsys.readouterr().err == ""


def test_the_other_frameworks_callback_is_not_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = lightning_trainer(ready())(callbacks=[TransformersCallback()])
    assert [type(c) for c in trainer.callbacks] == [TransformersCallback, LightningCallback]
    hf = transformers_trainer(ready())(callbacks=[LightningCallback()])
    assert [type(c) for c in hf.added] == [TransformersCallback]


def test_nothing_is_added_unless_auto_is_ready_and_on(capsys: pytest.CaptureFixture[str]) -> None:
    waiting = _Auto()  # torch not patched yet
    assert lightning_trainer(waiting)().callbacks == []
    assert not waiting.off
    off = ready()
    off.off = True  # the script made its own Trial, or a failure
    assert transformers_trainer(off)().added == []
    both = _Auto()
    both.off = True
    assert lightning_trainer(both)().callbacks == []
    assert capsys.readouterr().err == ""


def test_a_failure_is_one_warning_and_the_trainer_is_still_made(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    auto = ready()

    class Broken:
        def __init__(self, value: int) -> None:
            self.value = value  # no callbacks attribute: attaching fails

    frameworks.patch(Broken, "lightning", auto)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.auto"):
        trainer = Broken(5)
    assert trainer.value == 5
    assert auto.off
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "trainwatch: automatic instrumentation disabled in this process after an error"]
    assert "AttributeError" in caplog.records[0].getMessage()
    assert capsys.readouterr().err == ""


def test_the_framework_is_told_by_its_name_not_by_which_string_object(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Trainer:
        def __init__(self) -> None:
            self.callbacks: list[Any] = []

    name = "light" + "ning".upper().lower()  # equal to the literal, not the same object
    frameworks.patch(Trainer, name, ready())
    assert [type(c) for c in Trainer().callbacks] == [LightningCallback]
    assert capsys.readouterr().err.startswith("trainwatch: timing Lightning's Trainer")
