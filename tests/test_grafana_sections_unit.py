"""grafana.sections: the shared panels' options are keyword-only, so a legend or description
is never taken for a query (test_dashboards.py checks the panels the dashboards build)."""

from __future__ import annotations

import pytest

from grafana.promql import Promql
from grafana.sections import gpu_activity, gpu_ratio
from prometheus.rulegen.settings import load_settings


def test_a_gpu_ratios_description_and_legend_are_keyword_only() -> None:
    q = Promql(load_settings())
    with pytest.raises(TypeError):
        gpu_ratio(q, "Busy", "busy", "GPU busy")  # type: ignore[misc]


def test_gpu_activitys_legend_is_keyword_only() -> None:
    q = Promql(load_settings())
    with pytest.raises(TypeError):
        gpu_activity(q, "util", "sm", "tensor", "{{gpu}}")  # type: ignore[misc]
