"""One live trial per grouping key in a process.

Two trials pushing under one key (experiment, trial, rank) replace each other's group at every
push, so each would read as the other's; in one process that is a mistake (a hand-made
``Trial`` still open while a framework callback makes its own), and it fails when the second
one is created or started, naming where each was created. A closed trial frees its key.
"""

from __future__ import annotations

import os
import sysconfig
import threading
import traceback
import weakref
from typing import Any

_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARIES = tuple({os.path.abspath(p) + os.sep
                    for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
_INTEGRATIONS = {"lightning.py": "the Lightning TrainwatchCallback",
                 "transformers.py": "the Hugging Face TrainwatchCallback"}
Key = tuple[str, str, str]
_lock = threading.Lock()
_live: dict[Key, tuple[weakref.ref[Any], str]] = {}


class KeyInUse(ValueError):
    """Another live trial of this process has the grouping key."""


def created_here() -> str:
    """Where the caller's trial is being made: the innermost frame of the user's code (not
    this library's, not an installed package's), and the integration it came through."""
    through = None
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path.startswith(_OURS):
            through = _INTEGRATIONS.get(os.path.basename(path), through)
            continue
        if path.startswith(_LIBRARIES):
            continue
        return f"{frame.filename}:{frame.lineno}" + (f", by {through}" if through else "")
    return "an unknown place" + (f", by {through}" if through else "")


def _holder(key: Key, owner: object) -> str | None:
    """Where the live trial holding ``key`` was created, unless it is ``owner`` or none."""
    held = _live.get(key)
    if held is None:
        return None
    trial = held[0]()
    if trial is None:  # collected without close(): nothing pushes for it any more
        del _live[key]
        return None
    return None if trial is owner else held[1]


def _refuse(key: Key, first: str, second: str) -> KeyInUse:
    experiment, trial, rank = key
    return KeyInUse(
        f"trial {experiment}/{trial} rank {rank} is already live in this process (created at "
        f"{first}); another Trial under the same key (created at {second}) would overwrite its "
        "pushes and it this one's: close the first (leave its `with` block) before, or give "
        "this one another trial= or rank= (a framework callback measures the loader's and the "
        "step's limits itself: measure_limits=)")


def check(key: Key, owner: object, created: str) -> None:
    """``KeyInUse`` if another live trial holds ``key``."""
    with _lock:
        if (first := _holder(key, owner)) is not None:
            raise _refuse(key, first, created)


def claim(key: Key, owner: object, created: str) -> None:
    """Hold ``key`` for ``owner`` until :func:`release`; ``KeyInUse`` if another holds it."""
    with _lock:
        if (first := _holder(key, owner)) is not None:
            raise _refuse(key, first, created)
        _live[key] = (weakref.ref(owner), created)


def release(key: Key, owner: object) -> None:
    with _lock:
        held = _live.get(key)
        if held is not None and held[0]() in (owner, None):
            del _live[key]
