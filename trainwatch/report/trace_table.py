"""The report's "Profiler trace" section: each rank's latest on-demand capture (`trainwatch
profile`; trainwatch.diagnose.traces reads its pushed gauges), as tables: when, which rank, which
steps, the file; its top operators by self time with their share; where its time went (idle,
compute, communication: trial_instrumentation.trace_split). One line when no rank has one."""

from __future__ import annotations

from trainwatch.cliutil import ago
from trainwatch.diagnose.entry import RankReport, TraceSummary, step_range
from trainwatch.report.collect import Document
from trainwatch.report.markup import e
from trainwatch.report.window import utc
from trial_instrumentation.trace_split import KINDS

HEADING = "Profiler trace"
WHERE = {"cuda": "GPU time: its streams merged, from its first kernel to its last (Holistic "
                 "Trace Analysis's temporal breakdown); communication where no computation "
                 "overlaps it",
         "cpu": "CPU time: no GPU activity was captured; over the recorded steps, the process's "
                "operators on any thread (idle: Python between them, the data loader, sleeps)"}


def duration(seconds: float | None) -> str:
    """``duration(0.0123)`` -> '12.3 ms'; ``duration(4.5e-05)`` -> '45 µs'."""
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:,.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def section(doc: Document) -> str:
    traced = [r for r in doc.reports if r.trace is not None]
    if not traced:
        who = f"--experiment {doc.experiment}" + (f" --trial {doc.trial}" if doc.trial else "")
        return (f"<h2>{HEADING}</h2>"
                '<p class="note" data-profile="none">No profiler trace of this trial: '
                f"<code>trainwatch profile {e(who)}</code> records one of its next steps while "
                "it runs.</p>")
    return f"<h2>{HEADING}</h2>" + "".join(_rank(doc, r) for r in traced)


def _rank(doc: Document, r: RankReport) -> str:
    t = r.trace
    assert t is not None
    when = ("-" if t.ended is None else
            f"{utc(t.ended)} ({ago(max(doc.now - t.ended, 0))} ago)")
    kernels = ("-" if t.kernels_per_step is None else
               f"{t.kernels_per_step:,.0f} per step, {duration(t.kernel_seconds_mean)} mean")
    head = "".join(f"<tr><th>{e(k)}</th><td{c}>{v}</td></tr>" for k, v, c in (
        ("rank", e(f"{r.trial}/{r.rank} on {r.nodename or '?'}"), ""),
        ("captured", e(when), ' class="when"'),
        ("steps", e(step_range(t) or t.steps), ""),
        ("operator times on", e(t.device or "-"), ""),
        ("kernels", e(kernels), ""),
        ("file", f"<code>{e(t.path)}</code>", ' data-profile="path"')))
    return (f'<div class="capture" data-profile="capture" data-rank="{e(r.trial)}/{e(r.rank)}">'
            f'<div class="scroll"><table>{head}</table></div>'
            f'<div class="tables">{_ops(t)}<div>{_split(t)}</div></div></div>')


def _ops(t: TraceSummary) -> str:
    total = t.self_seconds or sum(s for _, s in t.ops)
    if not total or not t.ops:
        return '<p class="note">No operator self time in this trace.</p>'
    rows = "".join(f'<tr data-op="{e(op)}"><td><code>{e(op)}</code></td>'
                   f'<td class="num">{duration(seconds)}</td>'
                   f'<td class="num">{seconds / total:.0%}</td></tr>' for op, seconds in t.ops)
    return ('<table data-profile="ops"><tr><th>top operators by self time</th>'
            f"<th>per step</th><th>share</th></tr>{rows}</table>")


def _split(t: TraceSummary) -> str:
    shares = t.split_shares()
    if not shares:
        return ('<p class="note" data-profile="no-split">No idle/compute/communication split: '
                "the trace was too large to read back, or held nothing to split.</p>")
    rows = "".join(
        f'<tr data-kind="{kind}"><td>{kind}</td><td class="num">{duration(t.split.get(kind))}'
        f'</td><td class="num">{shares[kind]:.0%}</td></tr>' for kind in KINDS)
    where = WHERE.get(t.split_device or "", t.split_device or "")
    return (f'<table data-profile="split" data-device="{e(t.split_device)}"><tr><th>'
            f"{t.split_where} time</th><th>per step</th><th>share</th></tr>{rows}</table>"
            f'<p class="note">{e(where)}.</p>')
