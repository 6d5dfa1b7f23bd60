"""What a trial did with a profile request, for `trainwatch profile` to report within seconds:
a small JSON file the trial replaces (written to a temporary name, then renamed) at each turn of
a request: ``started``, ``refused`` (a capture is running), ``dropped`` (cannot write, no torch,
asked after the last step) or ``written``, with the line its log says.

Where: by pid in the user's runtime directory (``$XDG_RUNTIME_DIR``, else the temporary
directory, in ``trainwatch-<uid>/``, the signal's answer) and, where the trial watches a trigger
file, beside it (``<trigger>.rank<R>.json``: readable from every node of a shared file system).
Writing one never fails the trial; a directory owned by another user is not written to.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STARTED, REFUSED, DROPPED, WRITTEN = "started", "refused", "dropped", "written"


def by_pid(pid: int) -> Path:
    """The answer file of the trial process ``pid`` (same user, same node)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"trainwatch-{os.getuid()}" / f"profile-{pid}.json"


def beside(trigger: str | Path, rank: int | str) -> Path:
    """The answer file of rank ``rank`` beside the trigger file it watches."""
    return Path(f"{trigger}.rank{rank}.json")


def write(paths: list[Path], state: str, message: str, **fields: Any) -> None:
    """Replace each answer file with ``state`` and ``message`` (and ``fields``), now."""
    doc = json.dumps({"state": state, "message": message, "at": time.time(),
                      "pid": os.getpid(), **fields})
    for path in paths:
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if path.parent.stat().st_uid != os.getuid():
                continue  # someone else's directory: never answer into it
            part.write_text(doc)
            os.replace(part, path)
        except OSError as exc:
            log.debug("trainwatch: cannot write the profile answer %s: %s", path, exc)


def read(path: Path, since: float) -> dict[str, Any] | None:
    """The answer in ``path`` if written at or after ``since`` (Unix time), else None."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("at"), (int, float)):
        return None
    return doc if doc["at"] >= since else None
