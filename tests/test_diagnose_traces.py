"""`diagnose`'s line for a rank's latest profiler trace: read from the pushed gauges (a real
trial's collector, exposed and parsed as Prometheus returns it) and rendered under the verdict,
with its idle / compute / communication split."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trainwatch.diagnose import render, traces
from trainwatch.diagnose.figures import RankReport
from trial_instrumentation.profile_trace import ProfileCollector, ProfileSummary
from trial_instrumentation.trace_split import Split

KEY = ("e", "t", "0")


def pushed_rows() -> traces.Rows:
    """The gauges of one CPU trace, as (labels, value) rows by rank key."""
    collector = ProfileCollector(lambda: None, {"experiment": "e", "trial": "t", "rank": "0"})
    collector.latest = ProfileSummary("/traces/rank0.pt.trace.json.gz", 1204, 5, "cpu", 0.02,
                                      (("aten::mm", 0.0082), ("aten::addmm", 0.004)),
                                      ended=1_790_000_000.5, split=Split("cpu", 0.008, 0.002, 0.01))
    registry = CollectorRegistry()
    registry.register(collector)
    rows: traces.Rows = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            rows.setdefault(KEY, []).append(({"__name__": family.name, **sample.labels},
                                             sample.value))
    return rows


def test_diagnose_says_the_latest_trace_under_the_verdict() -> None:
    rows = pushed_rows()

    def by_rank(expr: str) -> traces.Rows:
        name = expr.split("{")[0]
        return {KEY: [r for r in rows[KEY] if r[0]["__name__"] == name]}

    found = traces.gather(by_rank, experiment="e", trial="t")
    report = RankReport("e", "t", "0", "node", "1", "1", "5m", trace=found[KEY])
    text = render.report_text(report)
    assert ("  trace of rank 0, steps 1,204–1,208: aten::mm 41%, aten::addmm 20%; "
            "CPU idle 50%, compute 40%, communication 10% (/traces/rank0.pt.trace.json.gz)"
            ) in text.splitlines()
    assert found[KEY].ended == 1_790_000_000.5
    assert found[KEY].split == {"idle": 0.01, "compute": 0.008, "communication": 0.002}
    assert "kernels" not in text  # a CPU trace says nothing of kernels
