"""`trainwatch report --usage`: "Where the GPU-hours went" (issue 40) as one self-contained page,
for people without Grafana: `trainwatch usage`'s table (its own figures, from
:func:`trainwatch.usage.gather`) and the dashboard's two plots over time (wasted GPUs stacked by
cause; GPUs held and busy) from range queries of the same GPU-seconds records
(trainwatch/contract/records.py), drawn as the trial report draws its panels.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import matplotlib

from trainwatch import usage
from trainwatch.contract import remedies
from trainwatch.contract.promql import by
from trainwatch.contract.records import IDLE_CAUSES, RecordNames
from trainwatch.promapi import COUNT, PrometheusAPI
from trainwatch.report.markup import e, script_json
from trainwatch.report.page import CSS, _dl, figure
from trainwatch.report.plots import PALETTE, _figure, _legend, _style, _svg, _time_axis, _times
from trainwatch.report.window import utc

Points = list[tuple[float, float]]
MAX_POINTS = 500  # a week at most this many points a line: 7d / 500 -> a 21-minute step
NUMBERS = "td.num { white-space: nowrap; } tr.total th { text-align: left; }\n"


@dataclass
class UsageDoc:
    """What the page shows: the table's groups and the two plots' lines (GPUs over time)."""

    by: str
    since: float
    end: float
    groups: list[usage.Group]
    outside: usage.Outside
    prometheus: str
    step: float = 60.0
    wasted: dict[str, Points] = field(default_factory=dict)  # cause -> idle GPUs
    held: Points = field(default_factory=list)
    busy: Points = field(default_factory=list)

    @property
    def start(self) -> float:
        return self.end - self.since


def step_for(since: float) -> float:
    """The range queries' step: whole minutes (the records' interval), at most MAX_POINTS.

    >>> step_for(3600), step_for(7 * 86400)
    (60, 1260)
    """
    return 60 * max(1, math.ceil(since / MAX_POINTS / 60))


def over_time(n: RecordNames, step: float) -> dict[str, str]:
    """The plots' PromQL: each record's fleet-wide GPU-seconds (RecordNames.fleet: a few
    series, where the rollups are one per trial and node) summed over one step, over the
    step: the GPUs held (idle, busy) on average in it (the dashboard's ``sum(record) / 60`` at
    a one-minute step)."""
    s = f"[{step:.0f}s]"

    def gpus(record: str, *labels: str) -> str:
        return f"sum {by(*labels)} (sum_over_time({record}{s})) / {step:.0f}" if labels else \
            f"sum(sum_over_time({record}{s})) / {step:.0f}"

    wasted, held, busy = plotted(n)
    return {"wasted": gpus(wasted, "cause"), "held": gpus(held), "busy": gpus(busy)}


def plotted(n: RecordNames) -> tuple[str, str, str]:
    """The records the plots read: the fleet's idle (by cause), held and busy GPU-seconds."""
    return (n.fleet(n.gpu_seconds_idle), n.fleet(n.gpu_seconds_held),
            n.fleet(n.gpu_seconds_busy))


def collect(api: PrometheusAPI, by_: str, since: float | None) -> UsageDoc:
    """`usage`'s figures over ``since`` (its own range rules: refused beyond the retention) and
    the plots' lines over the same range."""
    since = usage.over(api, since)
    end = time.time()
    groups, outside = usage.gather(api, by_, since)
    doc = UsageDoc(by_, since, end, groups, outside, api.url, step_for(since))
    asked = over_time(RecordNames("5m"), doc.step)
    for labels, points in api.query_range(asked["wasted"], doc.start, end, doc.step, COUNT):
        cause = labels.get("cause", "")
        if cause in IDLE_CAUSES:
            doc.wasted[cause] = points
    for figure_ in ("held", "busy"):
        found = api.query_range(asked[figure_], doc.start, end, doc.step, COUNT)
        setattr(doc, figure_, found[0][1] if found else [])
    return doc


def plot_svg(key: str, title: str, lines: list[tuple[str, Points]], span: tuple[float, float],
             stacked: bool) -> str:
    """GPUs over time: ``lines`` as (name, points), stacked or drawn over one another."""
    with matplotlib.rc_context(_style(key)):
        fig, ax = _figure()
        if stacked:
            grid = sorted({t for _, points in lines for t, _ in points})
            values = [dict(points) for _, points in lines]
            ax.stackplot(_times(grid), *[[v.get(t, 0.0) for t in grid] for v in values],
                         labels=[name for name, _ in lines], alpha=0.9,
                         colors=PALETTE[:len(lines)])
        else:
            for name, points in lines:
                ax.plot(_times([t for t, _ in points]), [v for _, v in points], label=name,
                        linewidth=1.4)
        ax.set_ylabel("GPUs")
        _time_axis(ax, span)
        ax.set_ylim(bottom=0)
        _legend(ax)
        return _svg(fig, title)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _cell(seconds: float, attr: str, extra: str = "") -> str:
    return (f'<td class="num" data-{attr}="{seconds!r}">{e(usage.hours(seconds))}'
            f"{e(extra)}</td>")


def _row(g: usage.Group, total: bool = False) -> str:
    top = ("-" if g.top is None else f"{g.top[0]}/{g.top[1]} ({usage.hours(g.top[2])})")
    top_attrs = ("" if g.top is None else
                 f' data-top-experiment="{e(g.top[0])}" data-top-trial="{e(g.top[1])}"'
                 f' data-top-wasted="{g.top[2]!r}"')
    mfu = "-" if g.mfu is None else f"{100 * g.mfu:.0f}%"
    return (f'<tr data-group="{e(g.name)}"' + (' class="total"' if total else "") + ">"
            + f"<{'th' if total else 'td'}>{e(g.name)}</{'th' if total else 'td'}>"
            + _cell(g.held, "held") + _cell(g.busy, "busy", f" ({_pct(g.busy, g.held)})")
            + _cell(g.idle, "wasted", f" ({_pct(g.idle, g.held)})")
            + "".join(_cell(g.wasted[c], f"wasted-{c.replace('_', '-')}") for c in IDLE_CAUSES)
            + _cell(g.low_mfu, "low-mfu")
            + f'<td class="num" data-mfu="{"" if g.mfu is None else repr(g.mfu)}">{e(mfu)}</td>'
            + f'<td class="top"{top_attrs}>{e(top)}</td></tr>')


def table(doc: UsageDoc) -> str:
    head = [doc.by, "held", "busy", "wasted", *IDLE_CAUSES.values(), usage.LOW_MFU_WORDS, "MFU",
            "top offender (wasted)"]
    rows = "".join(_row(g) for g in doc.groups) + _row(usage.totals(doc.groups), total=True)
    return ('<div class="scroll"><table data-usage="groups"><tr>'
            + "".join(f"<th>{e(h)}</th>" for h in head) + f"</tr>{rows}</table></div>")


def causes(doc: UsageDoc) -> str:
    """Each cause's share of the held GPU-hours, in diagnose's words, with its verdict's fix."""
    whole = usage.totals(doc.groups)
    items = []
    for cause, words in IDLE_CAUSES.items():
        verdict = usage.VERDICTS[cause]
        if verdict is not None and whole.wasted[cause] > 0:
            items.append(f'<li data-cause="{e(cause)}"><b>{e(words)}</b>: '
                         f"{e(usage.hours(whole.wasted[cause]))} GPU-h "
                         f"({e(_pct(whole.wasted[cause], whole.held))} of held), as diagnose "
                         f"says it: <b>{e(verdict[0])}</b>. {e(verdict[1])}</li>")
    if whole.low_mfu > 0:
        items.append(f'<li data-cause="low_mfu"><b>{e(usage.LOW_MFU_WORDS)}</b>: '
                     f"{e(usage.hours(whole.low_mfu))} GPU-h busy. {e(remedies.LOW_MFU)}</li>")
    o = doc.outside
    items.append(f'<li data-outside="trials">Outside any trial: '
                 f"{e(usage.hours(o.uninstrumented))} GPU-h on GPUs with processes but no trial "
                 f"(uninstrumented), {e(usage.hours(o.unused))} GPU-h on GPUs with neither "
                 "(unused)." + owners(o) + "</li>")
    return "<ul class=\"causes\">" + "".join(items) + "</ul>"


def owners(outside: usage.Outside) -> str:
    """Whom the uninstrumented GPU-hours went to (a pod, a Slurm job), most first, as many as
    `usage`'s table lists."""
    items = [f'<li data-owner="{e(o.owner.name)}" data-gpu-seconds="{o.held!r}" '
             f'data-busy-gpu-seconds="{o.busy!r}">uninstrumented: {e(o.owner.name)}'
             f"{e(f' on {o.owner.nodename}' if o.owner.nodename else '')}: "
             f"{e(usage.hours(o.held))} GPU-h, {e(usage.hours(o.busy))} busy "
             f"({e(_pct(o.busy, o.held))})</li>"
             for o in outside.owners[:usage.MAX_OWNERS]]
    more = len(outside.owners) - usage.MAX_OWNERS
    if more > 0:
        items.append(f"<li>... and {more} more (the page's JSON lists them all)</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def plots(doc: UsageDoc) -> str:
    span = (doc.start, doc.end)
    wasted = [(IDLE_CAUSES[c], doc.wasted[c]) for c in IDLE_CAUSES if doc.wasted.get(c)]
    held = [(name, points) for name, points in (("held", doc.held), ("busy", doc.busy)) if points]
    every = "; each point the GPUs on average over " + usage._duration(doc.step)
    return ('<div class="plots">'
            + figure("usage-wasted", "Idle GPUs by cause",
                     plot_svg("usage-wasted", "Idle GPUs by cause", wasted, span, True)
                     if wasted else None, "No idle GPU-seconds recorded in the range.")
            + figure("usage-held", "GPUs held and busy",
                     plot_svg("usage-held", "GPUs held and busy", held, span, False)
                     if held else None, "No GPU-seconds held by a live trial in the range.")
            + f'</div><p class="note">GPUs held by live trial ranks (the usage records, as the '
            f'"Where the GPU-hours went" dashboard draws them){e(every)}.</p>')


def page(doc: UsageDoc) -> str:
    title = f"trainwatch usage: where the GPU-hours went, by {doc.by}"
    window = f"the last {usage._duration(doc.since)}: {utc(doc.start)} to {utc(doc.end)}"
    body = [f"<h1>{e(title)}</h1>",
            _dl([("Window", e(window)), ("By", e(doc.by)), ("Prometheus", e(doc.prometheus)),
                 ("Generated", e(utc(time.time())))]),
            "<h2>GPU-hours per group</h2>",
            ('<p class="note">GPU-hours live trial ranks held, busy (the GPU-busy rule), wasted '
             "(held less busy) by cause, busy with a low MFU; most wasted first; the same "
             "figures as <code>trainwatch usage</code>.</p>"),
            table(doc),
            causes(doc) if doc.groups else
            f'<p class="empty">No GPU-seconds recorded in {e(window)}.</p>',
            "<h2>Over time</h2>", plots(doc),
            '<script type="application/json" id="usage-json">'
            + script_json(usage.as_json(doc.by, doc.since, doc.groups, doc.outside))
            + "</script>"]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)}</title><style>{CSS}{NUMBERS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
