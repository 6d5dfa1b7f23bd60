"""trainwatch.report.series on a stand-in for PrometheusAPI (canned range answers per
expression, each call kept): which way a panel's recorded lines are read (recorded, raw, at
the coverage edge, forced), and the panel made of them (legends, scale, order, zero lines,
byte units, the band past MAX_LINES, the title naming the busy source, the empty note)."""

from __future__ import annotations

from typing import Any

import pytest

from trainwatch.report.panels import Line, PanelSpec
from trainwatch.report.series import (
    COVERED,
    MAX_LINES,
    RAW,
    RECORDED,
    SLACK,
    Band,
    Legend,
    Panel,
    Series,
    busy_source,
    fetch,
    read,
    spread,
)
from trainwatch.report.window import Window

WINDOW = Window(1000.0, 1600.0, 2.0, False)


class FakeAPI:
    """query_range answers ``answers[expr]`` (else nothing) and keeps each call."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, float, float, float]] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> Any:
        self.asked.append((expr, start, end, step))
        return self.answers.get(expr, [])


def points(n: int, value: float = 1.0, start: float = 1000.0) -> list[tuple[float, float]]:
    return [(start + 2 * i, value) for i in range(n)]


def spec(*lines: Line, **kw: Any) -> PanelSpec:
    return PanelSpec("k", "Title", "units", tuple(lines), **kw)


def test_the_constants() -> None:
    assert (MAX_LINES, COVERED, SLACK, RECORDED, RAW) == (8, 0.95, 3, "recorded", "raw")


# read


def test_lines_without_a_raw_form_are_read_once_over_the_window_and_no_source_named() -> None:
    api = FakeAPI({"a": [({"x": "1"}, points(3))]})
    found, source = read(api, spec(Line("a", "{x}"), Line("b", "{x}")), WINDOW)  # type: ignore[arg-type]
    assert found == [(Line("a", "{x}"), [({"x": "1"}, points(3))]), (Line("b", "{x}"), [])]
    assert source is None
    assert api.asked == [("a", 1000.0, 1600.0, 2.0), ("b", 1000.0, 1600.0, 2.0)]
    _, source = read(FakeAPI({}), spec(Line("a", "l")), WINDOW, force=RAW)  # type: ignore[arg-type]
    assert source is None


@pytest.mark.parametrize("recorded, source", [(92, RECORDED), (91, RAW), (100, RECORDED)])
def test_the_recorded_series_are_drawn_when_they_hold_95_percent_less_3_a_series(
        recorded: int, source: str) -> None:
    line = Line("rec", "l", raw="raw")
    api = FakeAPI({"rec": [({}, points(recorded))], "raw": [({}, points(100))]})
    found, said = read(api, spec(line), WINDOW)  # type: ignore[arg-type]
    assert said == source
    assert found == [(line, [({}, points(recorded if source == RECORDED else 100))])]
    assert [a[0] for a in api.asked] == ["rec", "raw"]


def test_the_slack_is_per_raw_series_and_every_recorded_line_must_cover() -> None:
    # Two raw series of 50 points: 0.95 * 100 - 3 * 2 = 89 points are enough.
    two = [({"r": "0"}, points(50)), ({"r": "1"}, points(50))]
    api = FakeAPI({"rec": [({}, points(89))], "raw": two})
    assert read(api, spec(Line("rec", "l", raw="raw")), WINDOW)[1] == RECORDED  # type: ignore[arg-type]
    api = FakeAPI({"rec": [({}, points(88))], "raw": two})
    assert read(api, spec(Line("rec", "l", raw="raw")), WINDOW)[1] == RAW  # type: ignore[arg-type]
    # The first line covers, the second does not; a line with no raw form plays no part.
    api = FakeAPI({"r1": [({}, points(10))], "w1": [({}, points(10))],
                   "r2": [({}, points(1))], "w2": [({}, points(10))],
                   "plain": [({"p": "1"}, points(2))]})
    lines = (Line("r1", "l", raw="w1"), Line("plain", "p"), Line("r2", "l", raw="w2"))
    found, said = read(api, spec(*lines), WINDOW)  # type: ignore[arg-type]
    assert said == RAW
    assert found == [(lines[0], [({}, points(10))]), (lines[1], [({"p": "1"}, points(2))]),
                     (lines[2], [({}, points(10))])]
    assert [a[0] for a in api.asked] == ["r1", "plain", "r2", "w1", "w2"]
    # Nothing recorded and nothing raw: recorded (0 >= -0), not the raw.
    assert read(FakeAPI({}), spec(Line("r", "l", raw="w")), WINDOW)[1] == RECORDED  # type: ignore[arg-type]


def test_force_recorded_reads_the_recorded_lines_only() -> None:
    line = Line("rec", "l", raw="raw")
    api = FakeAPI({"rec": [({}, points(1))], "raw": [({}, points(100))]})
    found, said = read(api, spec(line), WINDOW, force=RECORDED)  # type: ignore[arg-type]
    assert (found, said) == ([(line, [({}, points(1))])], RECORDED)
    assert [a[0] for a in api.asked] == ["rec"]
    # A "recorded" read from an option (another str object, equal to RECORDED) forces the same.
    given = RECORDED.encode().decode()
    assert given == RECORDED and given is not RECORDED
    api = FakeAPI({"rec": [({}, points(1))], "raw": [({}, points(100))]})
    assert read(api, spec(line), WINDOW, force=given) == (found, RECORDED)  # type: ignore[arg-type]
    assert [a[0] for a in api.asked] == ["rec"]


def test_force_raw_reads_the_raw_form_of_each_line_that_has_one() -> None:
    lines = (Line("rec", "l", raw="raw"), Line("plain", "p"))
    api = FakeAPI({"rec": [({}, points(100))], "raw": [({}, points(5))],
                   "plain": [({}, points(3))]})
    found, said = read(api, spec(*lines), WINDOW, force=RAW)  # type: ignore[arg-type]
    assert said == RAW
    assert found == [(lines[0], [({}, points(5))]), (lines[1], [({}, points(3))])]
    assert [a[0] for a in api.asked] == ["plain", "raw"]
    # A "raw" read from an option (another str object, equal to RAW) forces the same.
    # Three raw points: the recorded lines left unread (none) would pass for covering them.
    api = FakeAPI({"rec": [({}, points(100))], "raw": [({}, points(3))],
                   "plain": [({}, points(3))]})
    given = RAW.encode().decode()
    assert given == RAW and given is not RAW
    assert read(api, spec(*lines), WINDOW, force=given) == (  # type: ignore[arg-type]
        [(lines[0], [({}, points(3))]), (lines[1], [({}, points(3))])], RAW)
    assert [a[0] for a in api.asked] == ["plain", "raw"]


# fetch


def test_each_series_is_a_line_named_by_its_legend_scaled_and_sorted() -> None:
    api = FakeAPI({"a": [({"rank": "1", "instance": "h:9"}, [(1000.0, 0.5)]),
                         ({"rank": "0", "instance": "g:9"}, [(1000.0, 0.25)]),
                         ({"instance": "z:9"}, [(1000.0, 1.0)])],
                   "cap": [({}, [(1000.0, 2.0)])]})
    panel = fetch(api, spec(Line("a", "r{rank} on {host} {nope}", scale=100.0),  # type: ignore[arg-type]
                            Line("cap", "ceiling", reference=True)),
                  WINDOW, {"h:9": "node-h"})
    assert [(s.name, s.points, s.reference) for s in panel.series] == [
        ("r0 on g:9 ?", [(1000.0, 25.0)], False), ("r1 on node-h ?", [(1000.0, 50.0)], False),
        ("r? on z:9 ?", [(1000.0, 100.0)], False), ("ceiling", [(1000.0, 2.0)], True)]
    assert panel.source is None and panel.note is None and panel.band is None
    assert (panel.ylabel, panel.heading, panel.title, panel.empty) == ("units", "Title", None,
                                                                        False)


def test_a_series_without_an_instance_has_host_unknown_and_its_busy_source_named() -> None:
    api = FakeAPI({"a": [({"source": "sm_active"}, points(2)), ({"source": "x"}, points(2)),
                         ({}, points(2))]})
    panel = fetch(api, spec(Line("a", "{host}|{busy_source}")), WINDOW, {"other:9": "n"})  # type: ignore[arg-type]
    assert sorted(s.name for s in panel.series) == ["?|?", "?|SM activity (NVML GPM)", "?|x"]


def test_drop_zero_leaves_out_lines_that_stay_zero_only() -> None:
    answers = {"a": [({"n": "zero"}, [(1.0, 0.0), (2.0, 0.0)]), ({"n": "once"}, [(1.0, 0.0),
                                                                                (2.0, 3.0)]),
                     ({"n": "none"}, [])]}
    kept = fetch(FakeAPI(answers), spec(Line("a", "{n}"), drop_zero=True), WINDOW, {})  # type: ignore[arg-type]
    assert [s.name for s in kept.series] == ["once"]
    every = fetch(FakeAPI(answers), spec(Line("a", "{n}")), WINDOW, {})  # type: ignore[arg-type]
    assert [s.name for s in every.series] == ["none", "once", "zero"]


def test_the_title_names_the_busy_sources_its_series_carry() -> None:
    api = FakeAPI({"a": [({"source": "utilization", "g": "1"}, points(1)),
                         ({"source": "sm_active", "g": "0"}, points(1)),
                         ({"source": "sm_active", "g": "2"}, points(1))]})
    panel = fetch(api, spec(Line("a", "{g}"), title_names_source=True), WINDOW, {})  # type: ignore[arg-type]
    assert panel.title == panel.heading == ("Title: NVML utilization (any kernel running) and "
                                            "SM activity (NVML GPM)")
    empty = fetch(FakeAPI({}), spec(Line("a", "{g}"), title_names_source=True), WINDOW, {})  # type: ignore[arg-type]
    assert empty.title is None and empty.heading == "Title"
    plain = fetch(api, spec(Line("a", "{g}")), WINDOW, {})  # type: ignore[arg-type]
    assert plain.title is None


@pytest.mark.parametrize("largest, unit, size", [
    (3 * 2.0**30, "GiB/s", 2.0**30), (2.0**30, "GiB/s", 2.0**30), (5e6, "MiB/s", 2.0**20),
    (100.0, "B/s", 1.0)])
def test_byte_rates_are_drawn_in_the_unit_of_the_largest_value(
        largest: float, unit: str, size: float) -> None:
    api = FakeAPI({"a": [({"d": "x"}, [(1.0, largest / 2), (2.0, largest)]),
                         ({"d": "y"}, [(1.0, largest / 4)])]})
    panel = fetch(api, PanelSpec("k", "T", "rate ({unit})", (Line("a", "{d}"),),  # type: ignore[arg-type]
                                 byte_rate=True), WINDOW, {})
    assert panel.ylabel == f"rate ({unit})"
    assert [s.points for s in panel.series] == [[(1.0, largest / 2 / size),
                                                 (2.0, largest / size)],
                                                [(1.0, largest / 4 / size)]]


def test_byte_rates_take_the_unit_of_the_largest_value_of_any_series_not_the_first() -> None:
    small, large = 3.7 * 2.0**20, 5.3 * 2.0**30  # MiB/s first by name, GiB/s after it
    api = FakeAPI({"a": [({"d": "x"}, [(1.0, small), (2.0, small / 3)]),
                         ({"d": "y"}, [(1.0, large / 7), (2.0, large)])]})
    panel = fetch(api, PanelSpec("k", "T", "rate ({unit})", (Line("a", "{d}"),),  # type: ignore[arg-type]
                                 byte_rate=True), WINDOW, {})
    assert panel.ylabel == "rate (GiB/s)" and "MiB" not in panel.ylabel
    assert [s.name for s in panel.series] == ["x", "y"]
    assert panel.series[1].points == [(1.0, large / 7 / 2.0**30), (2.0, large / 2.0**30)]
    assert panel.series[0].points == [(1.0, small / 2.0**30), (2.0, small / 3 / 2.0**30)]


def test_byte_rates_without_a_series_are_in_bytes() -> None:
    panel = fetch(FakeAPI({}), PanelSpec("k", "T", "r ({unit})", (Line("a", "l"),),  # type: ignore[arg-type]
                                         byte_rate=True), WINDOW, {})
    assert panel.ylabel == "r (B/s)" and panel.empty
    assert panel.note == "no data in this window"


def ranks(n: int, refs: tuple[float, ...] = ()) -> FakeAPI:
    return FakeAPI({"m": [({"r": str(i)}, [(1.0, float(i)), (2.0, float(i + 10))])
                          for i in range(n)],
                    "c": [({"c": str(v)}, [(1.0, v), (2.0, v - 1)]) for v in refs]})


def test_more_than_max_lines_are_one_band_and_the_lowest_ceiling() -> None:
    panel = fetch(ranks(MAX_LINES + 1, (50.0, 20.0, 30.0)),  # type: ignore[arg-type]
                  spec(Line("m", "rank {r}"), Line("c", "cap {c}", reference=True)), WINDOW, {})
    assert panel.band == Band("9 series", 9, [1.0, 2.0], [0.0, 10.0], [4.0, 14.0], [8.0, 18.0])
    assert [s.name for s in panel.series] == ["cap 20.0"]
    assert panel.note is None and not panel.empty
    without = fetch(ranks(MAX_LINES + 1), spec(Line("m", "rank {r}")), WINDOW, {})  # type: ignore[arg-type]
    assert without.band is not None and without.series == []


def test_max_lines_or_a_stacked_panel_keep_every_line() -> None:
    panel = fetch(ranks(MAX_LINES, (5.0,)), spec(Line("m", "{r}"),  # type: ignore[arg-type]
                                                 Line("c", "cap", reference=True)), WINDOW, {})
    assert panel.band is None and len(panel.series) == MAX_LINES + 1
    stacked = fetch(ranks(MAX_LINES + 4), spec(Line("m", "{r}"), stacked=True), WINDOW, {})  # type: ignore[arg-type]
    assert stacked.band is None and len(stacked.series) == MAX_LINES + 4


def test_an_empty_panel_says_its_own_words_and_keeps_the_source() -> None:
    line = Line("rec", "l", raw="raw")
    panel = fetch(FakeAPI({}), spec(line, when_empty="no GPU here"), WINDOW, {}, force=RAW)  # type: ignore[arg-type]
    assert (panel.note, panel.source, panel.empty) == ("no GPU here", RAW, True)
    panel = fetch(FakeAPI({}), spec(line), WINDOW, {})  # type: ignore[arg-type]
    assert panel.source == RECORDED


# The helpers


def test_busy_source_names_the_rules_source_in_words() -> None:
    assert busy_source({"source": "sm_active"}) == "SM activity (NVML GPM)"
    assert busy_source({"source": "utilization"}) == "NVML utilization (any kernel running)"
    assert busy_source({"source": "other"}) == "other"
    assert busy_source({}) == "?"


def test_a_legend_reads_a_missing_label_as_a_question_mark() -> None:
    assert "{a} {b}".format_map(Legend({"a": "1"})) == "1 ?"
    assert Legend({"a": "1"})["a"] == "1"


def test_spread_is_min_median_max_at_each_instant_any_line_has() -> None:
    band = spread([Series("a", [(2.0, 5.0), (0.0, 1.0)]), Series("b", [(0.0, 3.0)]),
                   Series("c", [(0.0, 2.0), (2.0, 9.0)]), Series("d", [(0.0, 10.0)])])
    assert band == Band("4 series", 4, [0.0, 2.0], [1.0, 5.0], [2.5, 7.0], [10.0, 9.0])
    assert spread([]) == Band("0 series", 0, [], [], [], [])


def test_a_series_is_a_measured_line_unless_made_a_reference() -> None:
    assert Series("a", []).reference is False
    assert Series("a", [], True).reference is True


def test_a_panel_is_empty_without_series_or_band() -> None:
    s = spec()
    assert Panel(s).empty and Panel(s).heading == "Title"
    assert not Panel(s, series=[Series("a", [])]).empty
    assert not Panel(s, band=spread([])).empty
    assert Panel(s, title="Other").heading == "Other"
    assert Panel(s).series == [] and Panel(s).series is not Panel(s).series
