"""A partial mutation run's results merged into the last full run's (rules.py, chart.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


def merge_rerun(last: dict[str, Any], fresh: dict[tuple[str, str], dict[str, Any]], key: str,
                note: str, dropped: Collection[str] = ()) -> dict[str, Any]:
    """``last`` with ``fresh``'s mutants (by ``(m[key], m["change"])``) in place of theirs,
    those new to it appended and ``note`` added to its reruns; a mutant whose ``m[key]`` is in
    ``dropped`` (rerun whole, by name: its mutants may differ now) is left out."""
    kept = [fresh.get((m[key], m["change"]), m) for m in last["mutants"]
            if m[key] not in dropped]
    known = {(m[key], m["change"]) for m in kept}
    last["mutants"] = kept + [m for k, m in fresh.items() if k not in known]
    last.setdefault("reruns", []).append(note)
    return last
