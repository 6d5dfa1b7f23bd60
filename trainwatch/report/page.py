"""The report as one HTML page: inline CSS and SVG, no script to run and nothing to fetch."""

from __future__ import annotations

import time
from collections.abc import Iterable

from trainwatch.cliutil import ago, signed
from trainwatch.diagnose.entry import HOW, RUNNING, RankReport, compare, render
from trainwatch.report import trace_table
from trainwatch.report.collect import Document
from trainwatch.report.markup import e, script_json
from trainwatch.report.plots import histogram_svg, panel_svg
from trainwatch.report.series import RAW, Panel
from trainwatch.report.window import utc

CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --muted: #59636e; --bg: #ffffff;
  --grid: #d0d7de; --card: #f6f8fa; --bad: #cf222e; --good: #1a7f37; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9198a1; --bg: #0d1117;
  --grid: #3d444d; --card: #151b23; --bad: #ff7b72; --good: #3fb950; } }
body { background: var(--bg); color: var(--fg); margin: 0 auto; max-width: 1500px;
  padding: 1rem 1.5rem; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 1.5rem; margin: .2rem 0 .6rem; } h2 { font-size: 1.2rem; margin: 1.4rem 0 .5rem;
  border-bottom: 1px solid var(--grid); padding-bottom: .2rem; } h3 { font-size: 1rem; margin: 0; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; margin: 0; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; }
.verdict { background: var(--card); border-left: 4px solid var(--good); padding: .6rem .9rem;
  margin: .6rem 0; border-radius: 4px; } .verdict.bottleneck { border-left-color: var(--bad); }
.verdict .title { font-size: 1.1rem; font-weight: 600; } .remedy { margin: .3rem 0; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(620px, 1fr)); gap: 1rem; }
figure.panel { margin: 0; background: var(--card); border-radius: 4px; padding: .5rem; }
figure.panel figcaption { font-weight: 600; font-size: 1.15rem; margin-bottom: .2rem; }
svg.plot { width: 100%; height: auto; display: block; }
.note, .empty { color: var(--muted); font-style: italic; }
pre { background: var(--card); padding: .6rem; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; } td, th { border-bottom: 1px solid var(--grid);
  padding: .2rem .6rem; text-align: left; vertical-align: top; } a { color: #4e8fd6; }
p.state { font-size: 1.15rem; font-weight: 600; margin: .2rem 0; }
.scroll { overflow-x: auto; } td.when { white-space: nowrap; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure.panel figcaption .source { font-weight: normal; color: var(--muted); }
.capture { margin-bottom: 1rem; } .capture .tables { display: flex; flex-wrap: wrap;
  gap: .5rem 2.5rem; align-items: flex-start; margin-top: .6rem; }
"""


def page(doc: Document) -> str:
    title = f"trainwatch report: {doc.experiment}" + (f"/{doc.trial}" if doc.trial else "")
    body = [f"<h1>{e(title)}</h1>", *(state(doc, r) for r in doc.reports), header(doc),
            "<h2>Verdict</h2>", *(verdict(r) for r in doc.reports), baseline(doc),
            trace_table.section(doc), *sections(doc), alerts(doc),
            '<script type="application/json" id="diagnose-json">'
            + script_json(render.reports_json(doc.reports)) + "</script>"]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    return '<dl class="meta">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def state(doc: Document, r: RankReport) -> str:
    """The run's state now, first thing on the page: running, or how and when it ended."""
    run = r.run
    if run is None:
        return ""
    word = run.state(doc.stale_after, doc.now)
    steps = r.verdict.steps if r.verdict is not None else None
    counted = "? steps" if steps is None else f"{steps:,} step" + ("" if steps == 1 else "s")
    ran = f"{counted} in {ago(run.seconds)}"
    if word == RUNNING:
        said = (f"Running: started {ago(doc.now - run.start)} ago, last push "
                f"{ago(doc.now - run.end)} ago")
    elif run.exit_reason is not None:
        said = (f"Ended {ago(doc.now - run.end)} ago "
                f"({HOW.get(run.exit_reason, run.exit_reason)}, {ran})")
    else:
        said = (f"Stopped pushing {ago(doc.now - run.end)} ago without a word (crashed or "
                f"killed; {ran})")
    who = f"{r.trial} rank {r.rank}: " if len(doc.reports) > 1 else ""
    return (f'<p class="state" data-state="{e(word)}" data-rank="{e(r.trial)}/{e(r.rank)}">'
            f"{e(who + said)}</p>")


def header(doc: Document) -> str:
    reports = doc.reports
    gpus = sorted({(g.instance or "", g.gpu or "", g.uuid) for r in reports for g in r.gpus})
    gpu_text = "<br>".join(
        e(f"GPU {gpu or '?'} on {inst or '?'}: {uuid} {doc.gpu_names.get(uuid, '')}".rstrip())
        for inst, gpu, uuid in gpus) or "none reported by the trial"
    read = ("now (as `trainwatch diagnose` reads it)" if doc.evaluated_at is None else
            f"{utc(doc.evaluated_at)} (the last sample of the trial in the window; a run that "
            "ended is judged over its life)")
    return _dl([
        ("Experiment", e(doc.experiment)),
        ("Trials", e(", ".join(sorted({r.trial for r in reports})))),
        ("Ranks", e(", ".join(f"{r.trial}/{r.rank}" for r in reports))),
        ("Nodes", e(", ".join(sorted({r.nodename or "?" for r in reports})))),
        ("GPUs", gpu_text),
        ("Window", e(doc.window.describe())
         + (e(f"; the trial's samples {utc(doc.span[0])} to {utc(doc.span[1])}")
            if doc.span else "")),
        ("Verdict read at", e(read)),
        ("Rates", e(f"over {doc.rate_window} windows (the recording rules'); a run's first "
                    "window is drawn as its counters' mean since it started")),
        ("Prometheus", e(doc.prometheus)),
        *([("Thresholds", e(doc.thresholds_from))] if doc.thresholds_from else []),
        ("Generated", e(utc(time.time()))),
    ])


def verdict(r: RankReport) -> str:
    """diagnose's verdict, fix and evidence for one rank: the same fields and the same text."""
    v = r.verdict
    if v is None:
        return ""
    head = render.verdict_text(r)[0]
    runbook = (f'<div>runbook: <a href="{e(v.runbook_url)}">{e(v.runbook_url)}</a></div>'
               if v.runbook_url else "")
    return (f'<section class="verdict{" bottleneck" if v.bottleneck else ""}" '
            f'data-rank="{e(r.trial)}/{e(r.rank)}" data-kind="{e(v.kind)}" '
            f'data-finding="{e(v.finding)}">'
            f"<h3>{e(r.trial)} rank {e(r.rank)} on {e(r.nodename or '?')}</h3>"
            f'<div class="title">{e(v.title)}</div>'
            f'<div class="head">{e(head)}</div>'
            + "".join(f'<div class="also">Also: {e(note)}</div>' for note in v.notes)
            + f'<div class="remedy"><b>What to change:</b> <span class="fix">{e(v.remedy)}</span>'
            f"</div>{runbook}"
            f"<details><summary>Evidence (trainwatch diagnose's text)</summary>"
            f'<pre class="diagnose-text">{e(render.report_text(r))}</pre></details>'
            "</section>")


def figure(key: str, caption: str, svg: str | None, note: str | None = None,
           source: str | None = None) -> str:
    """``source``: where recorded figures came from (series.RECORDED or RAW), if any."""
    inner = svg if svg is not None else f'<p class="empty">{e(note)}</p>'
    kind = "plot" if svg is not None else "empty"
    said = (' <span class="source">(from the raw series: the recording rules do not cover this '
            "window)</span>" if source == RAW else "")
    return (f'<figure class="panel" data-panel="{e(key)}" data-state="{kind}"'
            + (f' data-source="{e(source)}"' if source else "")
            + f"><figcaption>{e(caption)}{said}</figcaption>{inner}</figure>")


def _panel(p: Panel, span: tuple[float, float]) -> str:
    if p.empty:
        return figure(p.spec.key, p.heading, None, p.note, p.source)
    return figure(p.spec.key, p.heading, panel_svg(p, span), source=p.source)


def sections(doc: Document) -> list[str]:
    out = []
    for name, panels, note in doc.sections:
        out.append(f"<h2>{e(name)}</h2>")
        if note:
            out.append(f'<p class="note" data-section-note="{e(name)}">{e(note)}</p>')
        span = doc.span or (doc.window.start, doc.window.end)
        figures = [_panel(p, span) for p in panels]
        if name == "Training loop":
            figures += [figure(f"step-histogram-{t}", f"Step-time distribution — trial {t}",
                               histogram_svg(f"Step-time distribution {t}", buckets))
                        for t, buckets in sorted(doc.histogram.items())]
            out.append(limits(doc))
        if figures:
            out.append('<div class="plots">' + "".join(figures) + "</div>")
    return out


def limits(doc: Document) -> str:
    measured = [r for r in doc.reports if r.loader_limit is not None or r.step_limit is not None]
    if not measured:
        return ('<p class="note" data-limits="none">Loader and step limits: not measured by '
                "this trial (Trial.measure_loader_limit / measure_step_limit).</p>")
    rows = "".join(
        f"<tr><td>{e(r.trial)}/{e(r.rank)}</td><td>{render.num(r.loader_limit, '', 0)}</td>"
        f"<td>{render.num(r.step_limit, '', 0)}</td><td>{e(r.limits_advice or '-')}</td></tr>"
        for r in measured)
    return ('<table data-limits="measured"><tr><th>rank</th><th>loader (samples/s)</th>'
            f"<th>step (samples/s)</th><th>what they say</th></tr>{rows}</table>")


def alerts(doc: Document) -> str:
    if not doc.alerts:
        return ('<h2>Alerts</h2><p class="note" data-alerts="none">No alert about this trial, '
                "its GPUs or its nodes was pending or fired in the window.</p>")
    rows = "".join(
        f'<tr data-state="{"firing" if a.fired else "pending"}"><td>'
        + (f'<a href="{e(a.runbook_url)}" title="runbook">{e(a.name)}</a>' if a.runbook_url
           else e(a.name))
        + f"</td><td>{'fired' if a.fired else 'pending only'}</td><td>{e(a.about)}</td>"
        f"{_when(a.first)}{_when(a.last)}</tr>" for a in doc.alerts)
    return ('<h2>Alerts in the window</h2><p class="note">Every alert about this trial, its GPUs '
            "or its nodes that fired (or was pending) in the window, each linked to its "
            "runbook; the verdict's evidence lists those pending or firing at the instant it "
            'was read.</p><div class="scroll"><table data-alerts="fired"><tr><th>alert</th>'
            "<th>state</th><th>on</th><th>first seen</th><th>last seen</th>"
            f"</tr>{rows}</table></div>")


def _per_step(side: compare.Side, phase: str) -> str:
    return f"{render.ms(side.phase_seconds.get(phase))} ({render.pct(side.share(phase))})"


def _share(explained: float | None) -> str:
    """``_share(-0.001)`` -> '0%' (not '-0%')."""
    return "-" if explained is None else f"{explained:.0%}".replace("-0%", "0%")


def _busy(side: compare.Side) -> str:
    if side.gpu_busy is None:
        return "-"
    return f"{side.gpu_busy:.1%} ({side.gpu_busy_source})"


def _when(seconds: float) -> str:
    """A table cell with a UTC time, its date and its time of day each kept on one line."""
    day, clock = utc(seconds).split(" ", 1)
    return f'<td class="when">{e(day)}<br>{e(clock)}</td>'


def baseline(doc: Document) -> str:
    """compare's answer against the baseline: the two side by side, then what changed."""
    c = doc.comparison
    own = ('<p class="verdict-change"><b>Against its baseline:</b> <span data-baseline="line">'
           f"{e(doc.baseline_line)}</span></p>" if doc.baseline_line else "")
    if c is None:
        return f"<h2>Against the baseline</h2>{own}" if own else ""
    a, b = c.a, c.b
    rows = [("trial", a.reference, b.reference), ("state", a.state, b.state),
            ("ran", ago(a.run.seconds), ago(b.run.seconds)),
            ("steps", render.num(a.steps, '', 0), render.num(b.steps, '', 0)),
            ("steps/s", render.num(a.steps_per_second), render.num(b.steps_per_second)),
            ("samples/s", render.num(a.samples_per_second, '', 1),
             render.num(b.samples_per_second, '', 1)),
            ("step time", render.ms(a.step_seconds), render.ms(b.step_seconds)),
            ("GPU busy", _busy(a), _busy(b))]
    rows += [(p.phase, _per_step(a, p.phase), _per_step(b, p.phase))
             for p in c.changes if not p.untimed]
    table = "".join(f"<tr><th>{e(k)}</th><td>{e(x)}</td><td>{e(y)}</td></tr>"
                    for k, x, y in rows)
    changes = "".join(
        f'<tr data-phase="{e(ch.phase)}"><td>{e(ch.phase)}</td>'
        f'<td class="num">{signed(ch.delta_seconds * 1000)} ms per step</td>'
        f'<td class="num">{_share(ch.explained)}</td></tr>'
        for ch in c.changes) if c.delta_step_seconds is not None else ""
    ranked = ('<table data-compare="changes"><tr><th>phase</th><th>change (this trial minus '
              f"the baseline)</th><th>share of the difference</th></tr>{changes}</table>"
              if changes else "")
    return ('<h2>Against the baseline</h2><div class="scroll"><table data-compare="side-by-side">'
            f"<tr><th></th><th>this trial</th><th>baseline</th></tr>{table}</table></div>{own}"
            f'<p class="verdict-change"><b>What changed:</b> <span data-compare="summary">'
            f"{e(c.summary)}</span></p>{ranked}")
