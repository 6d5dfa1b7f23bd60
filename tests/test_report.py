"""`trainwatch report` without a stack: bad input, windows, the spread of many lines, themes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stack import free_port
from trainwatch.report.panels import PanelSpec
from trainwatch.report.series import Series, spread
from trainwatch.report.window import Window

TRAINWATCH = Path(sys.executable).parent / "trainwatch"


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), "report", "--experiment", "e", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_unreachable_prometheus_leaves_the_old_file_alone(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("the old report")
    done = report("--prometheus", f"http://127.0.0.1:{free_port()}", "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("trainwatch report: error: cannot reach Prometheus at")
    assert done.stderr.count("\n") == 1
    assert out.read_text() == "the old report" and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("where", ["missing/r.html", "file/r.html", "."])
def test_unwritable_output_fails_before_any_query(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("")
    # No Prometheus at all: the output is checked first, so its error is the one shown.
    done = report("--prometheus", f"http://127.0.0.1:{free_port()}", "-o",
                  str(tmp_path / where))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert str(tmp_path / where).rstrip("/.") in done.stderr and "Prometheus" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_empty_window_is_refused() -> None:
    done = report("--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z",
                  "-o", "/tmp/never.html")
    assert done.returncode == 2 and "the window is empty" in done.stderr


def test_window_step_keeps_lines_short() -> None:
    w = Window.of(since=86400, start=None, end=1e9)
    assert (w.start, w.step, w.ends_now) == (1e9 - 86400, 240.0, False)
    with pytest.raises(ValueError, match="exclude each other"):
        Window.of(since=60, start=0.0, end=None)


def test_many_ranks_draw_a_band_not_64_lines() -> None:
    from trainwatch.report.plots import panel_svg
    from trainwatch.report.series import Panel

    lines = [Series(f"rank {r}", [(1000.0 + t, float(r + t)) for t in range(5)])
             for r in range(64)]
    band = spread(lines)
    assert band.count == 64 and band.low[0] == 0 and band.high[0] == 63
    spec = PanelSpec("steps", "Steps per second", "steps/s", ())
    svg = panel_svg(Panel(spec, band=band, ylabel="steps/s"), (1000.0, 1004.0))
    assert "median of 64" in svg and "min–max of 64" in svg and "rank 3" not in svg
    assert svg.startswith("<svg") and "var(--fg)" in svg and "#010203" not in svg
