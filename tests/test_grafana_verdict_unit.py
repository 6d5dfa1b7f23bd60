"""grafana.verdict: an outcome is a fixed value, and the panel's expression, mappings and
description follow the outcomes given, in their order (test_dashboards.py checks the Trial
profile's own outcomes against `trainwatch diagnose`)."""

from __future__ import annotations

import dataclasses

import pytest

import grafana.verdict
from grafana.panels import Mapping
from grafana.promql import Promql
from grafana.verdict import Verdict, description, expression, mappings, verdicts
from prometheus.rulegen.settings import load_settings
from trainwatch.contract.checks import CHECKS, LOW_MFU

OUTCOMES = [Verdict(3, "Slow disk", "red", "disk > 0.7", "Move the data."),
            Verdict(7, "Fine", "green", "up", "Nothing.")]


def test_an_outcome_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        OUTCOMES[0].code = 4  # type: ignore[misc]


def test_the_first_holding_condition_gives_its_code() -> None:
    assert expression(OUTCOMES) == "(disk > 0.7) * 0 + 3\nor\n(up) * 0 + 7"
    assert mappings(OUTCOMES) == [Mapping(3, "Slow disk", "red"), Mapping(7, "Fine", "green")]
    assert description(OUTCOMES).splitlines()[2:] == ["3. **Slow disk**: Move the data.",
                                                      "7. **Fine**: Nothing."]


@pytest.mark.parametrize("checks", [len(CHECKS) - 1, len(CHECKS)])
def test_the_codes_run_one_to_n_whatever_the_number_of_checks(
        checks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's table, one check fewer (an odd count) or whole: the checks' codes, then low
    MFU, GPU-bound and no GPU metrics, each one more than the last (no code taken twice)."""
    monkeypatch.setattr(grafana.verdict, "CHECKS", CHECKS[:checks])
    outcomes = verdicts(Promql(load_settings()), ['experiment=~"$experiment"'])
    assert [v.code for v in outcomes] == list(range(1, checks + 4))
    assert [v.text for v in outcomes[checks:]] == [LOW_MFU[1], "GPU-bound", "No GPU metrics"]
