"""Text and JSON renderings of the reports; both carry the same fields."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence

from trainwatch.cliutil import ago, ms, printable
from trainwatch.diagnose import traces
from trainwatch.diagnose.baseline import Baseline
from trainwatch.diagnose.figures import RankReport
from trainwatch.diagnose.runs import RankKey
from trainwatch.diagnose.trials import TrialRow
from trainwatch.diagnose.verdict import OFF_THE_AIR, STALE

BAR_WIDTH = 30


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def num(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def quantile_ms(seconds: float | None, bounds: Sequence[float]) -> str:
    """A percentile read from a histogram, marked where it was interpolated inside one bucket
    (``bounds``: the histogram's finite upper bounds), so it is not read as measured.

    >>> quantile_ms(0.0423, (0.025, 0.05, 0.1)), quantile_ms(0.05, (0.025, 0.05))
    ('≈42.3 ms (within the 25–50 ms bucket)', '50.0 ms')
    """
    upper = min((b for b in bounds if seconds is not None and b >= seconds), default=None)
    if seconds is None or upper is None or math.isclose(seconds, upper):
        return ms(seconds)
    lower = max((b for b in bounds if b < seconds), default=0.0)
    return f"≈{ms(seconds)} (within the {lower * 1000:g}–{upper * 1000:g} ms bucket)"


def steps(count: int | None) -> str:
    return "? steps" if count is None else f"{count} step" + ("" if count == 1 else "s")


def bar(share: float) -> str:
    """A share's bar, clamped to 0-1; a NaN share (Prometheus's 0/0) has none: min() would
    keep its 1.0 against a NaN and draw the whole width."""
    if math.isnan(share):
        return ""
    return "█" * round(max(0.0, min(1.0, share)) * BAR_WIDTH)


def over(r: RankReport) -> str:
    """The time the report's shares and rates are measured over, as the text says it; where
    the dashboards plot another (the recorded series over the rules' window), it says theirs,
    so two figures for one share read as two windows.

    >>> r = RankReport("e", "t", "0", None, None, None, "5m")
    >>> over(r), over(dataclasses.replace(r, window="1h", dashboard_window="5m"))
    ('over the last 5m', 'over the last 1h; the dashboards plot the last 5m')
    """
    dashboards = r.dashboard_window or r.window
    if r.verdict is not None and r.verdict.early:
        said = "over its whole run so far"
    elif r.verdict is not None and r.verdict.kind in OFF_THE_AIR:
        said = "over its whole run"
    else:
        said = f"over the last {r.window}"
        if dashboards == r.window:
            return said
    return f"{said}; the dashboards plot the last {dashboards}"


def report_text(r: RankReport) -> str:
    head = (f"Trial {r.experiment}/{r.trial} rank {r.rank} on {r.nodename or '?'} "
            f"(pid {r.pid or '?'}, world size {r.world_size or '?'}), rate window {r.window}")
    if r.push_age_seconds is not None:
        head += f", last push {r.push_age_seconds:.1f} s ago"
    lines = [head]
    if r.verdict is not None and r.verdict.early:
        lines.append(f"  EARLY: the trial is younger than the {r.window} rate window; numbers over "
                     f"its whole run so far ({steps(r.verdict.steps)}, "
                     f"{num(r.lifetime_seconds, ' s', 0)} of samples)")
    elif r.verdict is not None and r.verdict.kind in OFF_THE_AIR:
        lines.append(f"  {'ENDED' if r.verdict.exit_reason else 'STOPPED'}: numbers over its "
                     f"whole run up to its last push "
                     f"({steps(r.verdict.steps)})")
    lines.append(f"  step time p50 {quantile_ms(r.step_seconds.get('0.5'), r.step_bounds)}, "
                 f"p95 {quantile_ms(r.step_seconds.get('0.95'), r.step_bounds)}; "
                 f"{num(r.steps_per_second)} steps/s, "
                 f"{num(r.samples_per_second, digits=1)} samples/s")
    lines.append(f"  phases (share of step time {over(r)}):")
    width = max((len(p) for p, _ in r.phases), default=0)
    lines += [f"    {phase:<{width}} {pct(share):>6}  {bar(share)}".rstrip()
              for phase, share in r.phases]
    if not r.phases:
        lines.append("    (none recorded over the window)")
    if r.gpus:
        for g in r.gpus:
            where = f" (GPU {g.gpu} on {g.instance})" if g.instance else " (no exporter series)"
            gpm = (f", SM active {pct(g.sm_active)}, tensor active {pct(g.tensor_active)}"
                   if g.sm_active is not None else "")
            lines.append(f"  GPU {g.uuid}{where}: utilization {pct(g.utilization)}{gpm}, "
                         f"memory used {pct(g.memory_used)}")
    else:
        lines.append("  GPUs: none reported by the trial")
    lines.append(f"  node CPU busy: {pct(r.node_cpu)}")
    if r.mfu is not None:
        lines.append(f"  {r.mfu.line()}")
    if r.loader_limit is not None or r.step_limit is not None:
        lines.append("  measured limits: " + (r.limits_advice or (
            f"loader {num(r.loader_limit, ' samples/s', 0)}, "
            f"step {num(r.step_limit, ' samples/s', 0)}")))
    lines += ranks_text(r)
    said = verdict_text(r)
    lines += ["", *said] if said else []  # no verdict: no empty line to end the report
    if r.trace is not None:
        lines.append(f"  {traces.trace_line(r.rank, r.trace)}")
    # Each entry is one line: a name's newline or escape sequence is written out, never a line
    # of its own (a trial named "x\nVERDICT: healthy" forges no verdict).
    return "\n".join(printable(line) for line in lines)


def ranks_text(r: RankReport) -> list[str]:
    """This rank against the trial's other ranks, and the trial's stragglers by name."""
    s = r.ranks
    if s is None:
        return []
    lines = [(f"  across ranks: own step time {ms(s.own_step_seconds)} (step time minus "
              f"waiting for other ranks), {s.vs_median:.2f}x the median rank's")]
    for rank, node, ratio in s.stragglers:
        lines.append(f"  STRAGGLER: rank {rank} on node {node or '?'} takes {ratio:.2f}x the "
                     f"median rank's own step time (threshold {s.threshold:g}); every other "
                     f"rank waits for it")
    if s.stragglers and s.remedy:
        lines.append(f"  what to change on the straggler: {s.remedy}")
    return lines + scaling_text(r)


def scaling_text(r: RankReport) -> list[str]:
    c = r.scaling
    if c is None:
        return []
    line = (f"  scaling efficiency: {pct(c.efficiency)} of ranks x the single-rank step limit"
            + ("" if c.threshold is None else f" (threshold {pct(c.threshold)})"))
    lines = [line]
    if c.why:
        lines.append(f"  SCALING held back by {c.why}")
    if c.evidence:
        lines.append(f"  evidence: {c.evidence}")
    if c.remedy:
        lines.append(f"  what to change for scaling: {c.remedy}")
    return lines


def verdict_text(r: RankReport) -> list[str]:
    v = r.verdict
    if v is None:
        return []
    head = f"VERDICT (early, {steps(v.steps)}): {v.title}" if v.early else f"VERDICT: {v.title}"
    if v.kind in OFF_THE_AIR and v.exit_reason is not None:
        head += f" ({v.alert})" if v.alert else ""
    elif v.kind == STALE:
        head += f" ({v.alert}: no push for over {v.threshold:g} s)"
    elif v.measured is not None and v.threshold is not None:
        head += f": {pct(v.measured)} {v.comparison} threshold {pct(v.threshold)}"
        if v.alert:
            head += f" ({v.alert})"
    lines = [head]
    if v.metric is not None:
        lines.append(f"  measured: {v.metric}, {over(r)}")
    if v.last_profile:
        # its phase timings before it stopped; a profiler trace is "trace of rank ..."
        lines.append(f"  last timings: {v.last_profile}")
    lines += [f"  also: {note}" for note in v.notes]
    if r.loader_cause is not None:
        lines.append(f"  cause: {r.loader_cause.title}: {r.loader_cause.evidence}")
    lines.append(f"  what to change: {v.remedy}")
    if v.cleanup:
        lines.append(f"  clean up once it is gone: {v.cleanup}")
    if r.alerts:
        lines.append("  alerts: " + ", ".join(f"{a.name} {a.state}" for a in r.alerts))
    elif r.verdict is not None and r.verdict.kind in OFF_THE_AIR:
        lines.append("  alerts: none fired during its run")
    else:
        lines.append("  alerts: none pending or firing")
    if v.runbook_url:
        lines.append(f"  runbook: {v.runbook_url}")
    return lines


def notes_text(notes: Sequence[str]) -> list[str]:
    """Where the thresholds came from, one line each, where not from the server's own rules."""
    return [f"thresholds: {note}" for note in notes]


def reports_text(reports: Sequence[RankReport],
                 baselines: Mapping[RankKey, Baseline] | None = None) -> str:
    """``baselines``: after a trial's lowest rank's verdict, its baseline's line."""
    return "\n\n".join(report_text(r) + _baseline_text((baselines or {}).get(
        (r.experiment, r.trial, r.rank))) for r in reports)


def _baseline_text(baseline: Baseline | None) -> str:
    return "" if baseline is None else f"\n  vs baseline: {printable(baseline.line())}"


def reports_json(reports: Sequence[RankReport], notes: Sequence[str] = (),
                 baselines: Mapping[RankKey, Baseline] | None = None) -> str:
    """``notes``: where the thresholds came from when not from the server's loaded rules (a
    global view: trainwatch.diagnose.rulesource), as ``thresholds_from``; ``baselines``: a
    trial's lowest rank carries its baseline (Baseline.as_dict) as ``baseline``."""
    docs = []
    for r in reports:
        doc = dataclasses.asdict(r)
        found = (baselines or {}).get((r.experiment, r.trial, r.rank))
        if found is not None:
            doc["baseline"] = found.as_dict()
        doc["phases"] = [{"phase": p, "share": s} for p, s in r.phases]
        doc["over"] = over(r)  # the time the shares and rates are measured over
        if r.verdict is not None:
            doc["verdict"]["exit_code"] = r.verdict.exit_code
            doc["verdict"]["finding"] = r.verdict.finding
        docs.append(doc)
    extra = {"thresholds_from": list(notes)} if notes else {}
    return json.dumps({"reports": docs, **extra}, indent=2, ensure_ascii=False)


def trials_text(rows: Sequence[TrialRow]) -> str:
    """One line per run; STEPS/S is over the rate window while it runs, else over its life."""
    header = ("EXPERIMENT", "TRIAL", "RANK", "NODE", "PID", "STARTED", "LAST PUSH", "STATE",
              "STEPS", "STEPS/S", "VS BASELINE", "LOADER", "GPU BUSY", "MFU", "CAUSE")
    table = [header] + [
        (r.experiment, r.trial, r.rank, r.nodename or "-", r.pid or "-", _when(r.started),
         _age(r.push_age_seconds), r.state, "-" if r.steps is None else f"{r.steps:,}",
         num(r.steps_per_second), r.vs_baseline_text, pct(r.dataloader_share), pct(r.gpu_busy), pct(r.mfu),
         r.cause or "-") for r in rows]
    cells = [[printable(cell) for cell in row] for row in table]  # a name stays on its line
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in cells)


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(seconds))


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{ago(seconds)} ago"


def trials_json(rows: Sequence[TrialRow], notes: Sequence[str] = ()) -> str:
    extra = {"thresholds_from": list(notes)} if notes else {}
    return json.dumps({"trials": [dataclasses.asdict(r) for r in rows], **extra}, indent=2)
