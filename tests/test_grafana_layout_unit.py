"""grafana.layout: panels flow left to right over 24 columns, a line as tall as its tallest
panel, rows on a line of their own, ids numbered in order; a width outside 1..24 is refused."""

from __future__ import annotations

from typing import Any

import pytest
from grafana_foundation_sdk.builders import dashboard as db

from grafana.layout import GRID_COLUMNS, Layout
from grafana.panels import Panel, Query, stat


def _panel(title: str) -> Panel:
    return stat(title, "none", [Query("up")], description=title)


def _panels(layout: Layout) -> list[Any]:
    return layout.apply(db.Dashboard("Example")).build().panels or []


def _placed(layout: Layout) -> list[tuple[str, int, int, int, int, int]]:
    """(title, id, x, y, w, h) of each panel and row, in order."""
    return [(p.title, p.id_val, p.grid_pos.x, p.grid_pos.y, p.grid_pos.w, p.grid_pos.h)
            for p in _panels(layout)]


@pytest.mark.parametrize("width", [0, -3, GRID_COLUMNS + 1, 100])
def test_a_width_outside_the_grid_is_refused_naming_it(width: int) -> None:
    with pytest.raises(ValueError, match=f"panel width {width} is outside 1..24"):
        Layout().add(_panel("Up"), width, 4)


def test_panels_flow_left_to_right_and_wrap_under_the_tallest_of_the_line() -> None:
    layout = Layout()
    layout.add(_panel("a"), 1, 3)
    layout.add(_panel("b"), 16, 7)
    layout.add(_panel("c"), 7, 2)    # 1 + 16 + 7 = 24: still the first line
    layout.add(_panel("d"), 5, 4)    # wraps under the tallest (7)
    layout.add(_panel("e"), 19, 1)   # 5 + 19 = 24: fits beside d
    layout.add(_panel("f"), GRID_COLUMNS, 2)  # wraps under d (4), not e (1)
    assert _placed(layout) == [
        ("a", 1, 0, 0, 1, 3), ("b", 2, 1, 0, 16, 7), ("c", 3, 17, 0, 7, 2),
        ("d", 4, 0, 7, 5, 4), ("e", 5, 5, 7, 19, 1), ("f", 6, 0, 11, 24, 2),
    ]


def test_a_row_takes_a_whole_line_of_its_own_and_a_number() -> None:
    layout = Layout()
    layout.add(_panel("a"), 6, 5)
    layout.row("Second")
    layout.add(_panel("b"), 6, 3)
    layout.row("Third")
    layout.row("Fourth")
    assert _placed(layout) == [
        ("a", 1, 0, 0, 6, 5), ("Second", 2, 0, 5, 24, 1), ("b", 3, 0, 6, 6, 3),
        ("Third", 4, 0, 9, 24, 1), ("Fourth", 5, 0, 10, 24, 1),
    ]

