"""grafana/generate.py's command line in-process (tests/test_dashboards.py runs it as a
process against the committed JSON): every dashboard written where --out says, folders made as
needed, one line per file; bad thresholds refused before anything is written."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from grafana import generate


def test_every_dashboard_is_written_into_a_new_nested_folder_one_line_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a" / "b"
    assert generate.main(["--out", str(out)]) == 0
    files = generate.render()
    assert sorted(p.name for p in out.iterdir()) == sorted(files) and len(files) == 4
    assert all((out / name).read_text(encoding="utf-8") == text for name, text in files.items())
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / name}" for name in files]


def test_bad_thresholds_are_refused_naming_them_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "thresholds.yaml"
    bad.write_text("alerts: [not, a, mapping]\n")
    out = tmp_path / "out"
    assert generate.main(["--thresholds", str(bad), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("generate.py: ") and captured.err.count("\n") == 1
    assert captured.out == "" and not out.exists()


# This file imported grafana.generate already: runpy runs it again as __main__, and says so.
@pytest.mark.filterwarnings("ignore:'grafana.generate' found in sys.modules")
def test_help_says_what_it_does_and_python_m_runs_main(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as done:
        generate.main(["--help"])
    assert done.value.code == 0
    assert ("Generate trainwatch's dashboards into grafana/dashboards/ (``make dashboards``)."
            in " ".join(capsys.readouterr().out.split()))
    monkeypatch.setattr(sys, "argv", ["generate", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("grafana.generate", run_name="__main__")
    assert done.value.code == 0 and len(list(tmp_path.glob("*.json"))) == 4


def test_the_dashboards_directory_holds_every_committed_dashboard_as_rendered() -> None:
    """DASHBOARDS_DIR is where the committed files are (Grafana's provisioning reads them):
    one file per builder, each what a fresh render writes."""
    committed = {p.name: p.read_text() for p in generate.DASHBOARDS_DIR.glob("*.json")}
    assert committed == generate.render()
