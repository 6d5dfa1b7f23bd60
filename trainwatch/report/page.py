"""The report as one HTML page: inline CSS and SVG, no script to run and nothing to fetch."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable

from trainwatch.diagnose import render
from trainwatch.diagnose.report import RankReport
from trainwatch.report.collect import Document
from trainwatch.report.plots import histogram_svg, panel_svg
from trainwatch.report.series import Panel
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
figure.panel figcaption { font-weight: 600; margin-bottom: .2rem; }
svg.plot { width: 100%; height: auto; display: block; }
.note, .empty { color: var(--muted); font-style: italic; }
pre { background: var(--card); padding: .6rem; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; } td, th { border-bottom: 1px solid var(--grid);
  padding: .2rem .6rem; text-align: left; vertical-align: top; } a { color: #4e8fd6; }
"""


def e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def page(doc: Document) -> str:
    title = f"trainwatch report: {doc.experiment}" + (f"/{doc.trial}" if doc.trial else "")
    body = [f"<h1>{e(title)}</h1>", header(doc), "<h2>Verdict</h2>",
            *(verdict(r) for r in doc.reports), *sections(doc), alerts(doc),
            '<script type="application/json" id="diagnose-json">'
            + render.reports_json(doc.reports).replace("</", "<\\/") + "</script>"]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    return '<dl class="meta">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def header(doc: Document) -> str:
    reports = doc.reports
    gpus = sorted({(g.instance or "", g.gpu or "", g.uuid) for r in reports for g in r.gpus})
    gpu_text = "<br>".join(
        e(f"GPU {gpu} on {inst or '?'}: {uuid} {doc.gpu_names.get(uuid, '')}".rstrip())
        for inst, gpu, uuid in gpus) or "none reported by the trial"
    read = ("now (as `trainwatch diagnose` reads it)" if doc.evaluated_at is None else
            f"{utc(doc.evaluated_at)} (the last sample of the trial in the window)")
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
        ("Prometheus", e(doc.prometheus)),
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
            f'data-rank="{e(r.trial)}/{e(r.rank)}" data-kind="{e(v.kind)}">'
            f"<h3>{e(r.trial)} rank {e(r.rank)} on {e(r.nodename or '?')}</h3>"
            f'<div class="title">{e(v.title)}</div>'
            f'<div class="head">{e(head)}</div>'
            f'<div class="remedy"><b>What to change:</b> <span class="fix">{e(v.remedy)}</span>'
            f"</div>{runbook}"
            f"<details><summary>Evidence (trainwatch diagnose's text)</summary>"
            f'<pre class="diagnose-text">{e(render.report_text(r))}</pre></details>'
            "</section>")


def figure(key: str, caption: str, svg: str | None, note: str | None = None) -> str:
    inner = svg if svg is not None else f'<p class="empty">{e(note)}</p>'
    kind = "plot" if svg is not None else "empty"
    return (f'<figure class="panel" data-panel="{e(key)}" data-state="{kind}">'
            f"<figcaption>{e(caption)}</figcaption>{inner}</figure>")


def _panel(p: Panel, span: tuple[float, float]) -> str:
    if p.empty:
        return figure(p.spec.key, p.spec.title, None, p.note)
    return figure(p.spec.key, p.spec.title, panel_svg(p, span))


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
                "its GPUs or its nodes fired in the window.</p>")
    rows = "".join(
        f"<tr><td>{e(a.name)}</td><td>{e(a.about)}</td><td>{e(utc(a.first))}</td>"
        f"<td>{e(utc(a.last))}</td><td>"
        + (f'<a href="{e(a.runbook_url)}">runbook</a>' if a.runbook_url else "-")
        + "</td></tr>" for a in doc.alerts)
    return ('<h2>Alerts that fired in the window</h2><table data-alerts="fired"><tr><th>alert'
            "</th><th>on</th><th>first seen firing</th><th>last seen firing</th><th>runbook</th>"
            f"</tr>{rows}</table>")
