"""The usage group (GPU-seconds per interval) records once a minute as shipped, and rules rendered
with a shorter rate window (live tests, `trainwatch stack up --rate-window 30s`) record at that
window: the group's interval and every record's GPU-seconds of one interval follow it together
(a held GPU is the interval's seconds), never one without the other."""

from __future__ import annotations

import re

from prometheus.rulegen.settings import load_settings
from prometheus.rulegen.usage import usage_group
from trainwatch.contract.records import USAGE_INTERVAL, RecordNames


def multipliers(settings: object) -> set[str]:
    """The interval seconds the group's records multiply by (held, busy, the GPUs outside)."""
    group = usage_group(settings, RecordNames(settings.rate_window))  # type: ignore[arg-type,attr-defined]
    return {m for rule in group["rules"]
            for m in re.findall(r"^(\d+) \* ", rule["expr"], re.MULTILINE)}


def unscaled(settings: object) -> list[str]:
    """The group's records that are not GPU-seconds: neither multiplied by the interval's
    seconds nor made of another record of the group (which is)."""
    group = usage_group(settings, RecordNames(settings.rate_window))  # type: ignore[arg-type,attr-defined]
    seconds = f"{settings.usage_seconds:g} * "  # type: ignore[attr-defined]
    return [rule["record"] for rule in group["rules"]
            if not rule["expr"].startswith(seconds)
            and not any(other["record"] in rule["expr"] for other in group["rules"])]


def test_the_shipped_group_records_a_minute_of_gpu_seconds() -> None:
    settings = load_settings()
    assert settings.usage_interval == USAGE_INTERVAL == "1m" and settings.usage_seconds == 60
    group = usage_group(settings, RecordNames(settings.rate_window))
    assert group["interval"] == "1m"
    assert multipliers(settings) == {"60"}
    assert unscaled(settings) == []


def test_a_shorter_rate_window_shortens_the_interval_and_its_seconds_together() -> None:
    short = load_settings().with_overrides(rate_window="10s")
    assert (short.usage_interval, short.usage_seconds) == ("10s", 10)
    assert usage_group(short, RecordNames("10s"))["interval"] == "10s"
    assert multipliers(short) == {"10"}
    # Every record: one that counts a GPU multiplies it by the interval's seconds (none left a
    # count of GPUs), the rest derive from those.
    assert unscaled(short) == []
    thirty = load_settings().with_overrides(rate_window="30s")
    assert (thirty.usage_interval, multipliers(thirty)) == ("30s", {"30"})


def test_a_window_of_a_minute_or_longer_keeps_the_minute() -> None:
    for window in ("1m", "60s", "5m", "10m"):
        kept = load_settings().with_overrides(rate_window=window)
        assert (kept.usage_interval, multipliers(kept)) == ("1m", {"60"}), window
    assert load_settings().with_overrides(for_="5s").usage_interval == "1m"
