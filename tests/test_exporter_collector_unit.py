"""What every exporter collector shares (exporter/collector.py): families grouped per spec, a
collector's ending, the registry, and the scrape wrapper's success, timing, counts and log
levels, read directly with collectors made here and a clock the test moves."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from exporter import collector as collector_module
from exporter.collector import (
    WARN_EVERY_SECONDS,
    CollectorError,
    CollectorTimeout,
    Registry,
    ScrapeCollector,
    build_families,
    emit,
)
from exporter.family import Family
from exporter.metrics import CPU_COUNT, CPU_SECONDS, MEMORY_TOTAL

LOGGER = "exporter.collector"
SUCCESS = "trainwatch_scrape_collector_success"
DURATION = "trainwatch_scrape_collector_duration_seconds"
TIMEOUTS = "trainwatch_scrape_collector_timeouts_total"
SUPPRESSED = "trainwatch_scrape_collector_warnings_suppressed_total"


def _rows(families: list[Family]) -> list[tuple[str, list[tuple[tuple[str, ...], float]]]]:
    return [(f.spec.name, [(tuple(labels), value) for labels, value in f.rows]) for f in families]


def test_build_families_groups_samples_per_spec_in_the_order_the_specs_first_appear() -> None:
    families = build_families([(CPU_SECONDS, ("user",), 3.5), (MEMORY_TOTAL, (), 2048.0),
                               (CPU_SECONDS, ("system",), 1.25), (CPU_COUNT, (), 8.0)])
    assert _rows(families) == [
        ("trainwatch_cpu_seconds_total", [(("user",), 3.5), (("system",), 1.25)]),
        ("trainwatch_memory_total_bytes", [((), 2048.0)]),
        ("trainwatch_cpu_count", [((), 8.0)]),
    ]
    assert build_families([]) == []


def test_emit_yields_what_was_read_then_names_every_failure_timeouts_first() -> None:
    samples = [(CPU_COUNT, (), 4.0), (MEMORY_TOTAL, (), 9.0)]
    assert _rows(list(emit(samples, []))) == [("trainwatch_cpu_count", [((), 4.0)]),
                                              ("trainwatch_memory_total_bytes", [((), 9.0)])]
    got: list[Family] = []
    with pytest.raises(CollectorError) as failed:
        for family in emit(samples, ["GPU 1: lost", "GPU 2: gone"]):
            got.append(family)  # noqa: PERF402 - kept up to the error
    assert len(got) == 2  # the families come before the error
    assert type(failed.value) is CollectorError
    assert str(failed.value) == "GPU 1: lost; GPU 2: gone"
    assert failed.value.logged is False
    got = []
    with pytest.raises(CollectorTimeout) as slow:
        for family in emit(samples, ["GPU 2: gone"], timeouts=["GPU 0: no answer"]):
            got.append(family)
    assert len(got) == 2
    assert str(slow.value) == "GPU 0: no answer; GPU 2: gone"
    with pytest.raises(CollectorTimeout) as only_slow:
        list(emit([], [], timeouts=["GPU 3: no answer"]))
    assert str(only_slow.value) == "GPU 3: no answer"
    assert CollectorError("x", logged=True).logged is True


class _Fixed:
    def __init__(self, *families: Family) -> None:
        self.families = families

    def collect(self) -> Iterator[Family]:
        yield from self.families


def _family(spec: object, *rows: tuple[tuple[str, ...], float]) -> Family:
    return Family(spec, list(rows))  # type: ignore[arg-type]


def test_the_registry_runs_its_collectors_in_order_and_finds_a_sample_by_its_exact_labels(
) -> None:
    registry = Registry()
    registry.register(_Fixed(_family(CPU_SECONDS, (("user",), 3.0), (("idle",), 7.0))))
    registry.register(_Fixed(_family(CPU_COUNT, ((), 16.0))))
    assert [f.spec.name for f in registry.collect()] == ["trainwatch_cpu_seconds_total",
                                                        "trainwatch_cpu_count"]
    assert registry.get_sample_value("trainwatch_cpu_seconds_total", {"mode": "idle"}) == 7.0
    assert registry.get_sample_value("trainwatch_cpu_seconds_total", {"mode": "user"}) == 3.0
    assert registry.get_sample_value("trainwatch_cpu_count") == 16.0
    assert registry.get_sample_value("trainwatch_cpu_count", {}) == 16.0
    # The labels must match exactly: none of them, another value, or one too many is None.
    assert registry.get_sample_value("trainwatch_cpu_seconds_total") is None
    assert registry.get_sample_value("trainwatch_cpu_seconds_total", {"mode": "steal"}) is None
    assert registry.get_sample_value("trainwatch_cpu_count", {"mode": "user"}) is None
    assert registry.get_sample_value("trainwatch_no_such_metric") is None


class _Script:
    """A collector that does, scrape by scrape, what the test lists: a message to fail
    with (``CollectorError``; ``"timeout:..."`` a ``CollectorTimeout``; ``"logged:..."`` one
    already logged) or None to succeed, yielding one family either way first."""

    def __init__(self, *steps: str | None) -> None:
        self.steps = list(steps)

    def collect(self) -> Iterator[Family]:
        yield _family(CPU_COUNT, ((), 2.0))
        step = self.steps.pop(0)
        if step is None:
            return
        if step.startswith("timeout:"):
            raise CollectorTimeout(step)
        raise CollectorError(step, logged=step.startswith("logged:"))


def _scrape(collector: ScrapeCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in collector.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    got = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    return got


C = (("collector", "a"),)
B = (("collector", "b"),)


class Slow:
    def collect(self) -> Iterator[Family]:
        start = time.perf_counter()  # work for 50 ms, timed as a collector's
        while time.perf_counter() - start < 0.05:
            pass
        yield _family(MEMORY_TOTAL, ((), 5.0))


def test_a_scrape_reports_each_collector_its_families_success_duration_counts_and_version(
) -> None:
    scrape = ScrapeCollector({"a": _Script(None), "b": Slow()}, version="1.2.3")
    families = list(scrape.collect())
    assert [f.spec.name for f in families] == [
        "trainwatch_cpu_count", "trainwatch_memory_total_bytes", SUCCESS, DURATION, TIMEOUTS,
        SUPPRESSED, "trainwatch_exporter_build_info"]
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in families for s in f.samples}
    assert got[(SUCCESS, C)] == 1.0 and got[(SUCCESS, B)] == 1.0
    assert got[(TIMEOUTS, C)] == 0 and got[(TIMEOUTS, B)] == 0
    assert got[(SUPPRESSED, C)] == 0 and got[(SUPPRESSED, B)] == 0
    assert got[("trainwatch_exporter_build_info", (("version", "1.2.3"),))] == 1.0
    assert 0.05 <= got[(DURATION, B)] < 0.9  # its own time, in seconds
    assert 0 <= got[(DURATION, C)] < 0.05


def test_a_collector_after_a_slow_one_reports_its_own_time_not_the_scrape_so_far() -> None:
    got = _scrape(ScrapeCollector({"b": Slow(), "a": _Script(None)}, version="v"))
    assert 0.05 <= got[(DURATION, B)] < 0.9
    assert 0 <= got[(DURATION, C)] < 0.05


def test_a_failed_collector_keeps_its_families_reports_zero_and_the_others_stay_one(
        caplog: pytest.LogCaptureFixture) -> None:
    scrape = ScrapeCollector({"a": _Script("disk unreadable"), "b": _Script(None)}, version="v")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        families = list(scrape.collect())
    assert [f.spec.name for f in families][:2] == ["trainwatch_cpu_count"] * 2
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in families for s in f.samples}
    assert got[(SUCCESS, C)] == 0.0
    assert got[(SUCCESS, B)] == 1.0
    assert got[(TIMEOUTS, C)] == 0  # an error is not a timeout
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: disk unreadable")]


def test_any_other_exception_is_a_bug_and_propagates() -> None:
    class Broken:
        def collect(self) -> Iterator[Family]:
            raise KeyError("bug")
            yield  # pragma: no cover

    with pytest.raises(KeyError):
        list(ScrapeCollector({"a": Broken()}, version="v").collect())


def test_timeouts_are_counted_per_collector_and_only_timeouts(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    scrape = ScrapeCollector({"a": _Script("timeout:GPU 0", "timeout:GPU 0", "plain", None),
                              "b": _Script(None, None, None, None)},
                             version="v", clock=lambda: now[0])
    counts = []
    for _ in range(4):
        got = _scrape(scrape)
        counts.append((got[(TIMEOUTS, C)], got[(TIMEOUTS, B)]))
    assert counts == [(1, 0), (2, 0), (2, 0), (2, 0)]


def test_warnings_are_one_per_interval_the_same_message_is_quiet_and_new_ones_are_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [5000.0]
    scrape = ScrapeCollector(
        # The same words again, in a string of their own: equal, not identical.
        {"a": _Script("m1", "m" + str(len("x")), "m2", "m3", "m4", "m5", None),
         "b": _Script("other", None, None, None, None, None, None)},
        version="v", clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    def scrape_at(t: float) -> tuple[float, float]:
        now[0] = 5000.0 + t
        got = _scrape(scrape)
        return got[(SUPPRESSED, C)], got[(SUPPRESSED, B)]

    assert scrape_at(0) == (0, 0)
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: m1"),
                               (logging.WARNING, "collector b failed: other")]
    # The same message again: debug, and not a suppressed warning.
    assert scrape_at(1) == (0, 0)
    assert _levels(caplog) == [(logging.DEBUG, "collector a failed: m1"),
                               (logging.INFO, "collector b recovered")]
    # A new message within the interval: debug and counted.
    assert scrape_at(WARN_EVERY_SECONDS - 0.5) == (1, 0)
    assert _levels(caplog) == [(logging.DEBUG, "collector a failed: m2")]
    # Exactly one interval after the last warning: a warning again.
    assert scrape_at(WARN_EVERY_SECONDS) == (1, 0)
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: m3")]
    # The interval runs from that warning, not from the first.
    assert scrape_at(WARN_EVERY_SECONDS + 30) == (2, 0)
    assert _levels(caplog) == [(logging.DEBUG, "collector a failed: m4")]
    assert scrape_at(2 * WARN_EVERY_SECONDS + 1) == (2, 0)
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: m5")]
    assert scrape_at(2 * WARN_EVERY_SECONDS + 2) == (2, 0)
    assert _levels(caplog) == [(logging.INFO, "collector a recovered")]


def test_a_failure_already_logged_by_its_source_stays_at_debug_and_so_does_its_recovery(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    scrape = ScrapeCollector({"a": _Script("logged:no GPU", "logged:no GPU 2", None, "late",
                                           None, None)},
                             version="v", clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    suppressed = []
    for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0):
        now[0] = t
        suppressed.append(_scrape(scrape)[(SUPPRESSED, C)])
    assert suppressed == [0, 0, 0, 0, 0, 0]  # logged ones are not suppressed warnings
    assert _levels(caplog) == [
        (logging.DEBUG, "collector a failed: logged:no GPU"),
        (logging.DEBUG, "collector a failed: logged:no GPU 2"),
        (logging.DEBUG, "collector a recovered"),
        # Its first own warning comes at once: the logged ones did not use up the interval.
        (logging.WARNING, "collector a failed: late"),
        (logging.INFO, "collector a recovered"),
    ]


def test_a_recovered_collector_that_fails_again_with_the_same_words_warns_again(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    scrape = ScrapeCollector({"a": _Script("m", None, "m", None)}, version="v",
                             clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for t in (0.0, 1.0, 100.0, 101.0):
        now[0] = t
        _scrape(scrape)
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: m"),
                               (logging.INFO, "collector a recovered"),
                               (logging.WARNING, "collector a failed: m"),
                               (logging.INFO, "collector a recovered")]


def test_each_collector_has_its_own_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    scrape = ScrapeCollector({"a": _Script("x1", "x2"), "b": _Script(None, "y1")},
                             version="v", clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger=LOGGER)
    _scrape(scrape)
    now[0] = 10.0
    got = _scrape(scrape)
    assert got[(SUPPRESSED, C)] == 1 and got[(SUPPRESSED, B)] == 0
    assert _levels(caplog) == [(logging.WARNING, "collector a failed: x1"),
                               (logging.WARNING, "collector b failed: y1")]


def test_the_warning_interval_is_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    scrape = ScrapeCollector({"a": _Script("w1", "w2", "w3")}, version="v", clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for t in (0.0, 59.5, 60.0):
        now[0] = t
        _scrape(scrape)
    assert [level for level, _ in _levels(caplog)] == [logging.WARNING, logging.DEBUG,
                                                       logging.WARNING]


def test_a_duration_is_the_end_less_the_start_whatever_the_clocks_origin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Just after boot the monotonic clock is small: a 5 s collector that started at 2 s.
    ticks = iter([2.0, 7.0])
    monkeypatch.setattr(collector_module.time, "perf_counter", lambda: next(ticks))
    got = _scrape(ScrapeCollector({"a": _Script(None)}, version="v"))
    assert got[(DURATION, C)] == 5.0
