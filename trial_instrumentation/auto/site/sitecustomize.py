"""trainwatch's automatic instrumentation, loaded at interpreter start (docs/instrumentation.md,
"Zero lines: trainwatch run").

`trainwatch run` puts this directory first on ``PYTHONPATH`` (a platform sets it, with
``TRAINWATCH_AUTO=1``, in a pod template or a Slurm task's environment). With ``TRAINWATCH_AUTO``
unset (or ``0``) nothing is loaded. Set, it installs one import watcher (standard library only,
nothing else imported here); the instrumentation itself loads when the process imports torch
(trial_instrumentation/auto/). Either way the next ``sitecustomize`` on ``sys.path`` (the user's
or the distribution's own) runs afterwards, as it would without this one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _enabled() -> bool:
    return os.environ.get("TRAINWATCH_AUTO", "").strip() not in ("", "0")


class _Watch:
    """A meta path finder that lets the real finders find a watched module and runs a hook
    once that module has executed; every other import is one dictionary look-up."""

    def __init__(self, hooks: dict[str, object]) -> None:
        self.hooks = hooks

    def find_spec(self, fullname: str, path: object, target: object = None) -> object:
        hook = self.hooks.pop(fullname, None)
        if hook is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original = getattr(loader, "exec_module", None)
        if original is None:
            return spec

        def exec_module(module: object) -> None:
            original(module)
            try:
                del loader.exec_module  # type: ignore[union-attr]
            except AttributeError:
                pass
            _run(hook, module)

        loader.exec_module = exec_module  # type: ignore[union-attr]
        return spec


def _run(hook: object, module: object) -> None:
    """The hook's module (trial_instrumentation.auto) loaded and called; never raises."""
    try:
        from trial_instrumentation import auto

        getattr(auto, str(hook))(module)
    except Exception as exc:  # noqa: BLE001 - never break the job: one line, then untouched
        sys.stderr.write(f"trainwatch: automatic instrumentation disabled in this process: "
                         f"{type(exc).__name__}: {exc}\n")


def _chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` after this directory, if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # as if it had been the one imported
    spec.loader.exec_module(module)


if _enabled():
    sys.meta_path.insert(0, _Watch({"torch": "on_torch",  # type: ignore[arg-type]
                                    "lightning.pytorch.trainer.trainer": "on_lightning",
                                    "transformers.trainer": "on_transformers"}))
_chain()
