"""The frame every trainwatch dashboard shares: uid, tags, time, links and variables."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm

from grafana.layout import Layout
from grafana.panels import DATASOURCE, DATASOURCE_VAR

TAG = "trainwatch"
# `=~".*"` instead of Grafana's default alternation of every value: stays short and also
# matches series whose label appeared after the dashboard loaded.
ALL_VALUE = ".*"


def query_variable(name: str, label: str, query: str) -> db.QueryVariable:
    """A multi-select Prometheus variable with "All", refreshed with the time range."""
    return (db.QueryVariable(name).label(label).query(query).datasource(DATASOURCE)
            .multi(True).include_all(True).all_value(ALL_VALUE)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.NATURAL_ASC)
            .current(dm.VariableOption(selected=True, text="All", value="$__all")))


def dashboard(uid: str, title: str, description: str, layout: Layout,
              variables: list[db.QueryVariable]) -> db.Dashboard:
    """A dashboard with the ``$datasource`` variable first, then ``variables``, then panels."""
    board = (db.Dashboard(title).uid(uid).description(description).tags([TAG])
             .time("now-1h", "now").refresh("30s").timezone("browser")
             .tooltip(dm.DashboardCursorSync.CROSSHAIR)
             .with_variable(db.DatasourceVariable(DATASOURCE_VAR).label("Data source")
                            .type("prometheus"))
             .link(db.DashboardLink("trainwatch").type(dm.DashboardLinkType.DASHBOARDS)
                   .tags([TAG]).as_dropdown(True).keep_time(True).include_vars(False)))
    for variable in variables:
        board.with_variable(variable)
    return layout.apply(board)
