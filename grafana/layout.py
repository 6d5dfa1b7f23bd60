"""Grid placement: panels flow left to right over 24 columns; ids are numbered in order.

Positions and ids come only from the order of ``add`` calls, so regenerating the dashboards
gives the same JSON byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm

from grafana.panels import Panel

GRID_COLUMNS = 24


@dataclass
class Layout:
    """Places panels left to right on the 24-column grid and numbers them in order.

    Example:
        >>> layout = Layout()
        >>> layout.row("GPUs")
        >>> from grafana.panels import Query, stat
        >>> layout.add(stat("Up", "none", [Query("up")], description="targets up"), 12, 4)
        >>> dash = layout.apply(db.Dashboard("Example")).build()
        >>> [(p.title, p.grid_pos.y, p.grid_pos.w) for p in dash.panels]
        [('GPUs', 0, 24), ('Up', 1, 12)]
    """

    _items: list[tuple[str, object]] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _line_height: int = 0
    _next_id: int = 1

    def _newline(self) -> None:
        self._x, self._y, self._line_height = 0, self._y + self._line_height, 0

    def _grid(self, w: int, h: int) -> dm.GridPos:
        if not 0 < w <= GRID_COLUMNS:
            raise ValueError(f"panel width {w} is outside 1..{GRID_COLUMNS}")
        if self._x + w > GRID_COLUMNS:
            self._newline()
        pos = dm.GridPos(x=self._x, y=self._y, w=w, h=h)
        self._x += w
        self._line_height = max(self._line_height, h)
        return pos

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def row(self, title: str) -> None:
        """Starts a (non-collapsed) row on a new line."""
        self._newline()
        row = db.Row(title).grid_pos(self._grid(GRID_COLUMNS, 1)).id(self._take_id())
        self._items.append(("row", row))
        self._newline()

    def add(self, panel: Panel, w: int, h: int) -> None:
        panel.grid_pos(self._grid(w, h)).id(self._take_id())  # type: ignore[attr-defined]
        self._items.append(("panel", panel))

    def apply(self, dashboard: db.Dashboard) -> db.Dashboard:
        for kind, item in self._items:
            if kind == "row":
                dashboard.with_row(item)  # type: ignore[arg-type]
            else:
                dashboard.with_panel(item)  # type: ignore[arg-type]
        return dashboard
