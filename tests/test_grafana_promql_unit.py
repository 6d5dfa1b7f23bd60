"""grafana.promql: the dashboards' shared PromQL pieces, one value per thresholds.yaml.

The byte-for-byte regeneration test of test_dashboards.py covers the text the builders write;
these check what it cannot see: a Promql is a fixed value (the builders share one), and
``parens`` leaves a lone selector bare and wraps anything else.
"""

from __future__ import annotations

import dataclasses

import pytest

from grafana.promql import Promql, parens
from prometheus.rulegen.settings import load_settings


def test_a_promql_is_frozen_so_the_builders_can_share_one() -> None:
    q = Promql(load_settings())
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.settings = load_settings()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.names = q.names  # type: ignore[misc]
    assert q == Promql(q.settings)
    assert q.names.window == q.settings.rate_window


@pytest.mark.parametrize("expr", ["up", "trainwatch_gpu_util_ratio{gpu=\"3\"}",
                                  "trainwatch:trial_step_seconds:rate5m"])
def test_a_lone_selector_is_left_bare(expr: str) -> None:
    assert parens(expr) == expr


@pytest.mark.parametrize("expr", ["a + b", "sum(up)", "up{a=\"1\"}[5m]", "rate(x[5m])",
                                  "up{a=\"{\"}}"])
def test_anything_else_is_parenthesised(expr: str) -> None:
    assert parens(expr) == f"({expr})"
