"""The report's "Profiler trace" section from diagnose's trace summaries (the live report test
renders a real capture): a GPU capture's kernels and split, a capture without a split, two ranks,
and the one line a trial that was never profiled gets."""

from __future__ import annotations

import re

from trainwatch.diagnose.figures import RankReport
from trainwatch.diagnose.traces import TraceSummary
from trainwatch.report.collect import Document
from trainwatch.report.trace_table import duration, section
from trainwatch.report.window import Window

NOW = 1_790_000_000.0
GPU = TraceSummary("/traces/e/t/rank0-x.pt.trace.json.gz", "1204-1208", "cuda", 0.010,
                   [("aten::mm", 0.0041), ("aten::add_", 4.5e-05)], 1900.0, 6e-6,
                   ended=NOW - 90, split_device="cuda",
                   split={"idle": 0.0076, "compute": 0.0122, "communication": 0.0002})


def doc(*traces: TraceSummary | None) -> Document:
    reports = [RankReport("e", "t", str(rank), f"node{rank}", "1", str(len(traces)), "5m",
                          trace=trace) for rank, trace in enumerate(traces)]
    return Document("http://prom", "e", "t", None, Window.of(600, None, NOW), None, reports,
                    now=NOW)


def cells(html: str, row: str) -> list[str]:
    """The cells of the table row whose first cell is ``row``, tags dropped."""
    found = re.search(rf"<tr[^>]*><t[hd]>(?:<code>)?{re.escape(row)}(?:</code>)?</t[hd]>(.*?)</tr>",
                      html)
    assert found, (row, html)
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", found[1])]


def test_a_gpu_capture_is_a_table_of_when_where_operators_and_split() -> None:
    html = section(doc(GPU))
    assert html.startswith("<h2>Profiler trace</h2>") and 'data-rank="t/0"' in html
    assert cells(html, "rank") == ["t/0 on node0"]
    assert cells(html, "captured") == ["2026-09-21 14:11:50 UTC (90 seconds ago)"]
    assert cells(html, "steps") == ["1,204–1,208"]
    assert cells(html, "kernels") == ["1,900 per step, 6 µs mean"]
    assert cells(html, "file") == ["/traces/e/t/rank0-x.pt.trace.json.gz"]
    assert cells(html, "aten::mm") == ["4.1 ms", "41%"]  # of all operators' self time
    assert cells(html, "aten::add_") == ["45 µs", "0%"]
    assert 'data-device="cuda"' in html and "GPU time" in html and "Holistic Trace Analysis" in html
    assert cells(html, "idle") == ["7.6 ms", "38%"]
    assert cells(html, "compute") == ["12.2 ms", "61%"]
    assert cells(html, "communication") == ["200 µs", "1%"]


def test_a_capture_without_a_split_says_so_and_ranks_each_get_theirs() -> None:
    bare = TraceSummary("/traces/rank1.gz", "7-7", "cpu", 0.002, [("aten::addmm", 0.001)])
    html = section(doc(GPU, bare))
    assert html.count('data-profile="capture"') == 2
    rank1 = html[html.index('data-rank="t/1"'):]
    assert cells(rank1, "steps") == ["7"] and cells(rank1, "kernels") == ["-"]
    assert cells(rank1, "captured") == ["-"]
    assert 'data-profile="no-split"' in rank1 and 'data-profile="split"' not in rank1


def test_no_capture_is_one_line_that_says_how_to_get_one() -> None:
    html = section(doc(None))
    assert 'data-profile="capture"' not in html and "<table" not in html
    said = ("No profiler trace of this trial: <code>trainwatch profile --experiment e --trial t"
            "</code> records one of its next steps while it runs.")
    assert re.findall(r'<p class="note" data-profile="none">(.*?)</p>', html) == [said]


def test_durations_are_milliseconds_from_one_and_microseconds_under_it() -> None:
    assert (duration(1e-3), duration(0.000999), duration(0.0123), duration(None)) == (
        "1.0 ms", "999 µs", "12.3 ms", "-")
    assert (duration(0.25), duration(1.5)) == ("250.0 ms", "1,500.0 ms")


def test_the_operator_device_is_shown_or_a_dash() -> None:
    assert cells(section(doc(GPU)), "operator times on") == ["cuda"]
    bare = TraceSummary("/traces/r.gz", "7-7", "", 0.002, [("aten::addmm", 0.001)])
    assert cells(section(doc(bare)), "operator times on") == ["-"]


def test_a_capture_stamped_ahead_of_now_was_captured_0_seconds_ago() -> None:
    """The trial's clock 30 s ahead of the reader's: no negative or wrapped age."""
    ahead = TraceSummary("/traces/r.gz", "7-7", "cpu", 0.002, [("aten::addmm", 0.001)],
                         ended=NOW + 30.0)
    assert cells(section(doc(ahead)), "captured") == ["2026-09-21 14:13:50 UTC (0 seconds ago)"]


def test_a_trace_without_operators_says_so_whatever_its_self_time() -> None:
    for self_seconds in (0.01, None):
        empty = TraceSummary("/traces/r.gz", "7-7", "cpu", self_seconds, [])
        html = section(doc(empty))
        assert "No operator self time in this trace." in html and 'data-profile="ops"' not in html


def test_a_split_of_another_device_names_it() -> None:
    other = TraceSummary("/traces/r.gz", "7-7", "mps", 0.002, [("aten::addmm", 0.001)],
                         split_device="mps", split={"idle": 0.001, "compute": 0.003})
    html = section(doc(other))
    assert '<p class="note">mps.</p>' in html and 'data-device="mps"' in html
