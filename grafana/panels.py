"""One helper per panel kind, all bound to the ``$datasource`` variable.

Every panel gets a unit, every target the datasource variable and a refId; ids and grid
positions come from ``grafana.layout.Layout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as statb
from grafana_foundation_sdk.builders import statetimeline as stlb
from grafana_foundation_sdk.builders import table as tableb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

DATASOURCE_VAR = "datasource"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")

Panel = cogbuilder.Builder[dm.Panel]


@dataclass(frozen=True)
class Query:
    """One PromQL target and its legend."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Mapping:
    """A value mapping: ``value`` is shown as ``text`` in ``color``."""

    value: int
    text: str
    color: str


def _targets(panel: Panel, queries: Sequence[Query], *, instant: bool = False,
             table: bool = False) -> None:
    for index, q in enumerate(queries):
        target = (pb.Dataquery().expr(q.expr).ref_id(chr(ord("A") + index))
                  .datasource(DATASOURCE).legend_format(q.legend or "__auto"))
        target = target.instant() if instant else target.range()
        if table:
            target = target.format(pm.PromQueryFormat.TABLE)
        panel.with_target(target)  # type: ignore[attr-defined]


def _value_mappings(mappings: Sequence[Mapping]) -> list[dm.ValueMapping]:
    return [dm.ValueMap(options={str(m.value): dm.ValueMappingResult(
        text=m.text, color=m.color, index=i) for i, m in enumerate(mappings)})]


def thresholds(base: str, *steps: tuple[float, str]) -> db.ThresholdsConfig:
    """Absolute threshold steps: ``base`` colour below the first step."""
    return (db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value=None, color=base),
                    *(dm.Threshold(value=v, color=c) for v, c in steps)]))


def timeseries(title: str, unit: str, queries: Sequence[Query], *, description: str,
               stacked: bool = False, max_value: float | None = None,
               threshold: tuple[float, str] | None = None, bad_below: bool = False) -> Panel:
    """A time series; ``threshold`` (value, colour) is drawn as a line, the side past it shaded
    in that colour and the other green: above it, or below it with ``bad_below`` (a figure
    whose alert fires under its threshold)."""
    panel = (tsb.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
             .min(0).fill_opacity(10 if not stacked else 60).show_points(cm.VisibilityMode.NEVER)
             .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                     .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
                     .calcs(["lastNotNull", "max"])))
    if stacked:
        panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if max_value is not None:
        panel.max(max_value)
    if threshold is not None:
        value, colour = threshold
        steps = thresholds(colour, (value, "green")) if bad_below else thresholds("green", threshold)
        panel.thresholds(steps).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE_AND_AREA))
    _targets(panel, queries)
    return panel


def state_timeline(title: str, unit: str, queries: Sequence[Query], *, description: str,
                   mappings: Sequence[Mapping]) -> Panel:
    """States over time (0/1 flags, enums), coloured and named by ``mappings``."""
    panel = (stlb.Panel().title(title).description(description).unit(unit)
             .datasource(DATASOURCE).mappings(_value_mappings(mappings))
             .show_value(cm.VisibilityMode.NEVER).merge_values(True))
    _targets(panel, queries)
    return panel


def stat(title: str, unit: str, queries: Sequence[Query], *, description: str,
         mappings: Sequence[Mapping] = ()) -> Panel:
    """Latest value per series, as words when ``mappings`` name the values."""
    panel = (statb.Panel().title(title).description(description).unit(unit)
             .datasource(DATASOURCE).color_mode(cm.BigValueColorMode.BACKGROUND)
             .graph_mode(cm.BigValueGraphMode.NONE)
             .text_mode(cm.BigValueTextMode.VALUE_AND_NAME)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if mappings:
        panel.mappings(_value_mappings(mappings))
    _targets(panel, queries, instant=True)
    return panel


@dataclass(frozen=True)
class Column:
    """A table column fed by one query's value: header, unit and, with ``steps``, its text
    coloured ``base`` below the first (value, colour) step."""

    header: str
    unit: str
    base: str = "green"
    steps: tuple[tuple[float, str], ...] = ()


def table(title: str, queries: Sequence[Query], *, description: str, unit: str = "none",
          columns: Sequence[Column] = (), links: Sequence[tuple[str, str]] = (),
          hide: Sequence[str] = ()) -> Panel:
    """Instant queries merged into one row per label set.

    ``columns[i]`` names and formats the value of ``queries[i]``; ``hide`` drops label
    columns; ``links`` are (title, url) data links on every cell.
    """
    panel = (tableb.Panel().title(title).description(description).unit(unit)
             .datasource(DATASOURCE))
    _targets(panel, queries, instant=True, table=True)
    single = len(queries) == 1
    renames: dict[str, str] = {}
    for index, column in enumerate(columns):
        # Grafana names the value field "Value" for one query, "Value #<refId>" for several.
        value_field = "Value" if single else f"Value #{chr(ord('A') + index)}"
        renames[value_field] = column.header
        properties = [dm.DynamicConfigValue(id_val="unit", value=column.unit)]
        if column.steps:
            properties += [
                dm.DynamicConfigValue(id_val="thresholds",
                                      value=thresholds(column.base, *column.steps).build()),
                dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            ]
        # Overrides apply after transformations, so they match the renamed header.
        panel.override_by_name(column.header, properties)
    if not single:
        panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    panel.with_transformation(dm.DataTransformerConfig(id_val="organize", options={
        "excludeByName": {name: True for name in ("Time", "__name__", "job", *hide)},
        "renameByName": renames,
    }))
    if links:
        panel.data_links([db.DashboardLink(t).url(u) for t, u in links])
    return panel
