"""What the report plots (trainwatch.report.panels), without a Prometheus: each panel's lines
select the one trial (and its rank when given) and none other, carry the scale that turns the
exporter's unit into the axis's (a worked conversion, not the constant), the ceilings are the
dashed references and only they, the flags (stacked, drop_zero, byte_rate, the busy source)
are on the panels that need them and off the rest, and byte rates pick the unit at each
boundary from both sides."""

from __future__ import annotations

import dataclasses

import pytest

from trainwatch.contract.records import RecordNames
from trainwatch.report import panels
from trainwatch.report.panels import Line, PanelSpec, byte_unit

SEL: dict[str, str | None] = {"experiment": "exp-a", "trial": None, "rank": "3"}
N = RecordNames("37s")


def by_key(specs: list[PanelSpec]) -> dict[str, PanelSpec]:
    keyed = {s.key: s for s in specs}
    assert len(keyed) == len(specs)  # no key twice
    return keyed


def test_a_lines_and_a_panels_defaults_are_plain() -> None:
    line = Line("up", "{job}")
    assert (line.scale, line.reference, line.raw) == (1.0, False, None)
    spec = PanelSpec("k", "T", "y", (line,))
    assert (spec.stacked, spec.drop_zero, spec.byte_rate, spec.title_names_source) == (
        False, False, False, False)
    assert spec.when_empty == "no data in this window"
    # Both are frozen (and so hashable): one spec serves every report without being changed.
    with pytest.raises(dataclasses.FrozenInstanceError):
        line.scale = 2.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.stacked = True  # type: ignore[misc]
    assert len({spec, PanelSpec("k", "T", "y", (Line("up", "{job}"),))}) == 1


@pytest.mark.parametrize("several", [False, True])
def test_the_training_loops_panels_select_one_trial_and_name_its_ranks(several: bool) -> None:
    specs = panels.trial_panels(N, SEL, "t-19", several)
    phases, steps, samples = specs
    assert [s.key for s in specs] == ["phases-t-19", "steps-t-19", "samples-t-19"]
    suffix = " — trial t-19" if several else ""
    assert [s.title for s in specs] == [f"Share of step time by phase{suffix}",
                                        f"Steps per second{suffix}",
                                        f"Samples per second{suffix}"]
    who = "trial {trial} rank {rank}" if several else "rank {rank}"
    assert [line.legend for line in steps.lines] == [who]
    assert [line.legend for line in samples.lines] == [
        who, "loader limit (measured)", "step limit (measured)"]
    # The phases stack, as shares in percent: a share of 0.415 is drawn at 41.5.
    assert phases.stacked and not steps.stacked and not samples.stacked
    [share] = phases.lines
    assert share.legend == "{phase}" and share.scale * 0.415 == pytest.approx(41.5)
    assert not share.reference
    for spec in specs:
        for line in spec.lines:
            for expr in filter(None, (line.expr, line.raw)):
                assert 'trial="t-19"' in expr and '"exp-a"' in expr and 'rank="3"' in expr
                assert "t-1\"" not in expr
    # The rates are per rank, the recorded series with the raw counter's rate beside them.
    assert steps.lines[0].expr.startswith(f"sum by (trial, rank) ({N.steps_rate}{{")
    assert "trainwatch_trial_steps_total" in (steps.lines[0].raw or "")
    assert samples.lines[0].expr.startswith(f"sum by (trial, rank) ({N.samples_rate}{{")
    assert "trainwatch_trial_samples_total" in (samples.lines[0].raw or "")
    assert "trainwatch_trial_samples_total" not in (steps.lines[0].raw or "")
    assert share.expr.startswith(f"avg by (phase) ({N.phase_share}{{")
    # The measured limits are ceilings: dashed, never spread, no raw form; the rates are not.
    assert [line.reference for line in samples.lines] == [False, True, True]
    assert [line.raw is None for line in samples.lines] == [False, True, True]
    assert [line.scale for line in steps.lines + samples.lines] == [1.0] * 4
    assert not any(s.drop_zero or s.byte_rate or s.title_names_source for s in specs)


def test_the_loop_panels_of_each_trial_differ_only_in_the_trial() -> None:
    one = panels.trial_panels(N, SEL, "t-19", True)
    other = panels.trial_panels(N, SEL, "t-2", True)
    assert [s.key for s in other] == ["phases-t-2", "steps-t-2", "samples-t-2"]
    for a, b in zip(one, other):
        assert [line.expr.replace('"t-19"', '"t-2"') for line in a.lines] == [
            line.expr for line in b.lines]
        assert all('"t-19"' not in line.expr for line in b.lines)


def test_the_gpu_panels_scale_each_unit_to_the_axis_and_dash_the_ceilings() -> None:
    specs = panels.gpu_panels(SEL)
    keyed = by_key(specs)
    assert specs[0].key == panels.BUSY_PANEL  # GPU busy first
    assert list(keyed) == [panels.BUSY_PANEL, "gpu-util", "gpu-sm", "gpu-tensor", "gpu-memory",
                           "gpu-power", "gpu-clock", "gpu-throttle"]
    # Every line is joined to the selected trial's GPUs.
    for spec in specs:
        for line in spec.lines:
            assert "* on (uuid) group_left () max by (uuid) (trainwatch_trial_gpu_info{" in line.expr
            assert 'experiment="exp-a"' in line.expr and 'rank="3"' in line.expr
            assert "trial=" not in line.expr  # no trial asked: none selected
    # Ratios to percent: 0.4375 busy is 43.75 %.
    for key in (panels.BUSY_PANEL, "gpu-util", "gpu-sm", "gpu-tensor"):
        [line] = keyed[key].lines
        assert line.scale * 0.4375 == pytest.approx(43.75), key
        assert not line.reference
    # Bytes to GiB: 3 GiB and a half of a 80 GiB board.
    used, total = keyed["gpu-memory"].lines
    assert used.scale * 3.5 * 1024**3 == pytest.approx(3.5)
    assert total.scale * 80 * 1024**3 == pytest.approx(80.0)
    assert (used.reference, total.reference) == (False, True)
    assert (used.legend, total.legend) == ("{host} GPU {gpu} used", "{host} GPU {gpu} total")
    # Hertz to MHz: 1.41 GHz is 1410 MHz.
    [clock] = keyed["gpu-clock"].lines
    assert clock.scale * 1.41e9 == pytest.approx(1410.0) and not clock.reference
    power, limit = keyed["gpu-power"].lines
    assert (power.scale, limit.scale) == (1.0, 1.0)
    assert (power.reference, limit.reference) == (False, True)
    [throttle] = keyed["gpu-throttle"].lines
    assert (throttle.scale, throttle.reference, throttle.legend) == (1.0, False, "{reason}")
    # Only the throttle reasons leave out lines that stay 0; only the busy panel names its
    # source; only the GPM panels say why they may be empty.
    assert [s.key for s in specs if s.drop_zero] == ["gpu-throttle"]
    assert [s.key for s in specs if s.title_names_source] == [panels.BUSY_PANEL]
    assert [s.key for s in specs if s.when_empty == panels.GPM_NOTE] == ["gpu-sm", "gpu-tensor"]
    assert not any(s.stacked or s.byte_rate for s in specs)
    # The busy rule is recorded (with its raw form); the exporter's gauges are not.
    [busy] = keyed[panels.BUSY_PANEL].lines
    assert busy.expr.startswith(f"{RecordNames.gpu_busy} ") and busy.raw is not None
    assert busy.legend == "{host} GPU {gpu}: {busy_source}"
    assert all(line.raw is None for s in specs[1:] for line in s.lines)


def test_the_node_panels_rate_bytes_without_lo_and_dash_the_memory_total() -> None:
    specs = panels.node_panels(N, {"experiment": "exp-a", "trial": "t-19", "rank": None})
    keyed = by_key(specs)
    assert list(keyed) == ["node-cpu", "node-memory", "node-disk", "node-network"]
    for spec in specs:
        for line in spec.lines:
            assert "max by (nodename) (trainwatch_trial_info{" in line.expr
            assert 'trial="t-19"' in line.expr and "rank=" not in line.expr
    [cpu] = keyed["node-cpu"].lines
    assert cpu.scale * 0.0625 == pytest.approx(6.25) and cpu.raw is not None
    assert cpu.expr.startswith(N.cpu_utilization)
    available, total = keyed["node-memory"].lines
    assert available.scale * 12.25 * 2**30 == pytest.approx(12.25)
    assert total.scale * 251 * 2**30 == pytest.approx(251.0)
    assert (available.reference, total.reference) == (False, True)
    assert [s.key for s in specs if s.byte_rate] == ["node-disk", "node-network"]
    for key in ("node-disk", "node-network"):
        for line in keyed[key].lines:
            assert 'device!="lo"' in line.expr and 'device!="lo"' in (line.raw or "")
            assert line.raw is not None and ":rate37s" in line.expr
            assert ":rate37s" not in line.raw and "[37s]" in line.raw
            assert (line.scale, line.reference) == (1.0, False)
    assert [line.legend for line in keyed["node-disk"].lines] == [
        "{nodename} read", "{nodename} written"]
    assert [line.legend for line in keyed["node-network"].lines] == [
        "{nodename} received", "{nodename} sent"]
    assert "disk_read_bytes" in keyed["node-disk"].lines[0].expr
    assert "disk_written_bytes" in keyed["node-disk"].lines[1].expr
    assert not any(s.stacked or s.drop_zero or s.title_names_source for s in specs)


@pytest.mark.parametrize(("largest", "unit"), [
    (0.0, "B/s"), (1023.0, "B/s"), (1024.0, "KiB/s"), (2**20 - 1, "KiB/s"), (2**20, "MiB/s"),
    (2**30 - 1, "MiB/s"), (2**30, "GiB/s"), (7.5 * 2**40, "GiB/s"),
])
def test_byte_rates_are_drawn_in_the_largest_unit_they_reach(largest: float, unit: str) -> None:
    got, size = byte_unit(largest)
    assert got == unit
    # The unit's size: the largest value in it is at least 1 and (but for GiB) under 1024.
    drawn = largest / size
    assert (drawn >= 1 or unit == "B/s") and (drawn < 1024 or unit == "GiB/s")
    assert size == {"B/s": 1, "KiB/s": 1024, "MiB/s": 1024**2, "GiB/s": 1024**3}[unit]


def test_each_gpu_line_reads_the_exporter_metric_its_title_axis_and_legend_say() -> None:
    """The metric behind each line is one the exporter serves, per GPU; in the axis's unit
    (a ratio for %, bytes for GiB, watts, hertz for MHz); of what the title names (its first
    word); and a total or limit line reads the total or limit, the others neither."""
    import re

    from exporter import metrics as exported
    served = {s.name: s for s in exported.ALL}
    unit = {"(%)": "_ratio", "(GiB)": "_bytes", "(W)": "_watts", "(MHz)": "_hertz"}
    checked = 0
    for spec in panels.gpu_panels(SEL)[1:-1]:  # not the busy rule nor the throttle reasons
        [suffix] = [v for k, v in unit.items() if k in spec.ylabel]
        title = set(re.split(r"[^a-z]+", spec.title.lower()))
        for line in spec.lines:
            metric = line.expr.split()[0]
            assert metric in served and "uuid" in served[metric].labels, (spec.key, metric)
            assert metric.endswith(suffix), (spec.key, metric)
            stem = metric.removeprefix("trainwatch_gpu_").removesuffix(suffix).split("_")
            assert stem[0] in title, (spec.key, metric)
            extra = line.legend.removeprefix("{host} GPU {gpu}").split()
            assert set(extra) == {"used", "total", "limit"} & set(stem), (spec.key, metric)
            checked += 1
    assert checked == 8


def test_each_network_line_reads_its_own_direction_and_each_disk_line_its_own() -> None:
    direction = {"received": "network_receive_bytes", "sent": "network_transmit_bytes",
                 "read": "disk_read_bytes", "written": "disk_written_bytes"}
    keyed = by_key(panels.node_panels(N, {"experiment": "exp-a", "trial": "t-19", "rank": None}))
    for key in ("node-disk", "node-network"):
        for line in keyed[key].lines:
            stem = direction[line.legend.split()[-1]]
            assert N.device_rate(stem) in line.expr and f"{stem}_total" in (line.raw or "")
            others = set(direction.values()) - {stem}
            assert not any(N.device_rate(o) in line.expr for o in others), line.expr
