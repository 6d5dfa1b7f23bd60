"""grafana.panels: the panel helpers' values are fixed, and what they build follows their
arguments, including the combinations no committed dashboard uses (test_dashboards.py's
byte-for-byte regeneration covers the ones they do)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from grafana.panels import (
    Column,
    Mapping,
    Panel,
    Query,
    stat,
    state_timeline,
    table,
    timeseries,
)


@pytest.mark.parametrize("value, field", [
    (Query("up", "{{instance}}"), "expr"),
    (Mapping(3, "three", "red"), "text"),
    (Column("Steps/s", "none", steps=((0.25, "red"),)), "header"),
])
def test_the_panel_helpers_values_are_frozen(value: object, field: str) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, "changed")


@pytest.mark.parametrize("helper, leading", [
    (timeseries, ("Up", "none")), (stat, ("Up", "none")), (table, ("Up",)),
])
def test_the_description_is_keyword_only(helper: Callable[..., Panel],
                                         leading: tuple[str, ...]) -> None:
    """A panel's description (and what follows it) is never taken by position."""
    with pytest.raises(TypeError):
        helper(*leading, [Query("up")], "targets up")


def test_a_state_timelines_mappings_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        state_timeline("Up", "none", [Query("up")], "targets up",  # type: ignore[misc]
                       [Mapping(1, "up", "green")])


@pytest.mark.parametrize("bad_below, under, over", [(False, "green", "red"),
                                                     (True, "red", "green")])
def test_a_threshold_line_shades_its_bad_side_in_its_colour(bad_below: bool, under: str,
                                                            over: str) -> None:
    panel = timeseries("Efficiency", "percentunit", [Query("up")], description="d",
                       threshold=(0.63, "red"), bad_below=bad_below).build()
    steps = panel.field_config.defaults.thresholds.steps
    assert [(s.value, s.color) for s in steps] == [(None, under), (0.63, over)]
    assert panel.field_config.defaults.custom.thresholds_style.mode.value == "line+area"


def test_without_a_threshold_nothing_is_drawn() -> None:
    panel = timeseries("Up", "none", [Query("up")], description="d", bad_below=True).build()
    assert panel.field_config.defaults.thresholds is None
