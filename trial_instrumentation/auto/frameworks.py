"""Lightning's and the Hugging Face ``Trainer``: under automatic instrumentation, each new
trainer gets trainwatch's own callback (trial_instrumentation/lightning.py, transformers.py)
and the generic hooks stand aside, so a process has one trial, never two. A trainer that already
has a ``TrainwatchCallback`` (its author added one) is left as it is; so is every trainer once
the script made a ``Trial`` of its own."""

from __future__ import annotations

import os
import sys
from typing import Any


def patch(trainer_class: type, framework: str, auto: Any) -> None:
    """Wrap ``trainer_class.__init__`` to add the callback after the trainer is built."""
    original = trainer_class.__init__  # type: ignore[misc]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if auto.ready and not auto.off:
            try:
                _attach(self, framework, auto)
            except Exception as exc:  # noqa: BLE001 - never break the job: one warning, then off
                auto.fail(exc)

    trainer_class.__init__ = __init__  # type: ignore[misc]


def _attach(trainer: Any, framework: str, auto: Any) -> None:
    from trial_instrumentation.auto import naming

    callback_class: Any
    if framework == "lightning":
        from trial_instrumentation.lightning import TrainwatchCallback as callback_class
        callbacks = trainer.callbacks
    else:
        from trial_instrumentation.transformers import TrainwatchCallback as callback_class
        callbacks = trainer.callback_handler.callbacks
    if any(isinstance(callback, callback_class) for callback in callbacks):
        return  # the script's own; explicit instrumentation wins
    env = os.environ
    experiment, trial, where = naming.choose(env, sys.argv)
    callback = callback_class(
        experiment=None if env.get("TRAINWATCH_EXPERIMENT") else experiment,
        trial=None if env.get("TRAINWATCH_TRIAL") else trial)
    auto.stand_aside()  # the callback times from here; its Trial is made when training starts
    if framework == "lightning":
        callbacks.append(callback)
    else:
        trainer.add_callback(callback)
    which = "Lightning's" if framework == "lightning" else "the Hugging Face"
    sys.stderr.write(f"trainwatch: timing {which} Trainer with trainwatch's callback as "
                     f"experiment {env.get('TRAINWATCH_EXPERIMENT') or experiment}, trial "
                     f"{env.get('TRAINWATCH_TRIAL') or trial} (names from {where})\n")
