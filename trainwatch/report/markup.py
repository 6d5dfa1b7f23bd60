"""What every part of the report page writes its text through."""

from __future__ import annotations

import html


def e(value: object) -> str:
    """``value`` as HTML text (None as nothing)."""
    return html.escape("" if value is None else str(value))
