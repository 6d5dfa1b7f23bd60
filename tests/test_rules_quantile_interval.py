"""The step and phase quantiles' group runs at thresholds.yaml's quantile_interval, and rules
rendered with a shorter rate window (live tests, a local demo) evaluate them with the rest."""

from __future__ import annotations

from prometheus.rulegen.recording import recording_groups
from prometheus.rulegen.settings import load_settings


def _quantile_group(settings: object) -> dict[str, object]:
    [group] = [g for g in recording_groups(settings)  # type: ignore[arg-type]
               if any("quantile_rate" in r["record"] for r in g["rules"])]
    return group


def test_the_deployed_quantiles_run_at_their_own_interval() -> None:
    settings = load_settings()
    assert settings.quantile_interval == "1m"
    assert _quantile_group(settings)["interval"] == "1m"


def test_a_rate_window_shorter_than_the_quantile_interval_drops_it() -> None:
    short = load_settings().with_overrides(rate_window="10s")
    assert short.quantile_interval is None and "interval" not in _quantile_group(short)
    assert load_settings().with_overrides(rate_window="1m").quantile_interval == "1m"
    assert load_settings().with_overrides(rate_window="10m").quantile_interval == "1m"
    assert load_settings().with_overrides(for_="5s").quantile_interval == "1m"
