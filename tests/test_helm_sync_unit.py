"""helm/sync_chart_files.py on folders of its own (the chart's real copies are checked by
tests/test_helm.py): what it copies (each source folder's pattern only), the three kinds of
drift it names, in order, and a sync that rewrites only what differs and removes orphans."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import pytest

from helm import sync_chart_files as sync_module
from helm.sync_chart_files import drift, expected, main, sync


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Two source folders (rules: *.yml; nested/deeper: *.json) and an empty chart folder."""
    rules, boards, chart = tmp_path / "rules", tmp_path / "boards", tmp_path / "chart"
    rules.mkdir()
    boards.mkdir()
    chart.mkdir()
    (rules / "b.yml").write_bytes(b"groups: [b]\n")
    (rules / "a.yml").write_bytes(b"groups: [a]\n")
    (rules / "notes.txt").write_bytes(b"not copied\n")  # outside the pattern
    (rules / "c.yaml").write_bytes(b"not copied either\n")  # .yaml is not *.yml
    (boards / "fleet.json").write_bytes(b"{}\n")
    monkeypatch.setattr(sync_module, "SOURCES", {"rules": (rules, "*.yml"),
                                                 "nested/deeper": (boards, "*.json")})
    monkeypatch.setattr(sync_module, "CHART_FILES", chart)
    return tmp_path, chart


def test_expected_holds_each_folders_pattern_only_under_its_chart_folder(
        folders: tuple[Path, Path]) -> None:
    assert expected() == {Path("rules/a.yml"): b"groups: [a]\n",
                          Path("rules/b.yml"): b"groups: [b]\n",
                          Path("nested/deeper/fleet.json"): b"{}\n"}


def test_drift_names_missing_then_differing_then_orphaned_files_each_sorted(
        folders: tuple[Path, Path]) -> None:
    _, chart = folders
    assert drift() == ["nested/deeper/fleet.json: missing in the chart",
                       "rules/a.yml: missing in the chart", "rules/b.yml: missing in the chart"]
    (chart / "rules").mkdir()
    (chart / "rules" / "b.yml").write_bytes(b"groups: [old]\n")  # sorts after its source
    (chart / "rules" / "a.yml").write_bytes(b"groups: [a]\n")  # equal: not named
    (chart / "nested" / "deeper").mkdir(parents=True)
    (chart / "nested" / "deeper" / "fleet.json").write_bytes(b"[]\n")  # sorts before it
    (chart / "rules" / "gone.yml").write_bytes(b"x\n")
    (chart / "rules" / "also-gone.yml").write_bytes(b"x\n")
    assert drift(chart) == ["nested/deeper/fleet.json: differs from its source",
                            "rules/b.yml: differs from its source",
                            "rules/also-gone.yml: no source any more",
                            "rules/gone.yml: no source any more"]
    (chart / "nested" / "deeper" / "fleet.json").unlink()
    assert drift(chart / "rules") == [  # another chart folder: everything relative to it
        "nested/deeper/fleet.json: missing in the chart", "rules/a.yml: missing in the chart",
        "rules/b.yml: missing in the chart", "a.yml: no source any more",
        "also-gone.yml: no source any more", "b.yml: no source any more",
        "gone.yml: no source any more"]


def test_sync_copies_what_differs_leaves_equal_copies_alone_and_removes_orphans(
        folders: tuple[Path, Path]) -> None:
    _, chart = folders
    (chart / "rules").mkdir()
    (chart / "rules" / "a.yml").write_bytes(b"groups: [a]\n")
    os.utime(chart / "rules" / "a.yml", ns=(1_000_000_000, 1_000_000_000))
    (chart / "rules" / "b.yml").write_bytes(b"groups: [a]\n")  # sorts before its source
    (chart / "rules" / "gone.yml").write_bytes(b"x\n")
    sync()
    assert drift() == []
    assert (chart / "rules" / "b.yml").read_bytes() == b"groups: [b]\n"
    assert (chart / "nested" / "deeper" / "fleet.json").read_bytes() == b"{}\n"
    assert not (chart / "rules" / "gone.yml").exists()
    assert (chart / "rules" / "a.yml").stat().st_mtime_ns == 1_000_000_000  # not rewritten
    assert sorted(p.relative_to(chart).as_posix() for p in chart.rglob("*") if p.is_file()) \
        == ["nested/deeper/fleet.json", "rules/a.yml", "rules/b.yml"]


def test_check_syncs_nothing_and_names_each_problem_exit_1_and_a_sync_exits_0(
        folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, chart = folders
    (chart / "stale.yml").write_bytes(b"x\n")
    assert main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "helm/trainwatch/files/nested/deeper/fleet.json: missing in the chart",
        "helm/trainwatch/files/rules/a.yml: missing in the chart",
        "helm/trainwatch/files/rules/b.yml: missing in the chart",
        "helm/trainwatch/files/stale.yml: no source any more"]
    assert sorted(p.name for p in chart.rglob("*")) == ["stale.yml"]  # nothing written
    assert main([]) == 0
    assert capsys.readouterr().err == "" and drift() == []
    assert main(["--check"]) == 0 and capsys.readouterr().err == ""


# This file imported the module already: runpy runs it again as __main__, and says so.
@pytest.mark.filterwarnings("ignore:'helm.sync_chart_files' found in sys.modules")
def test_help_says_what_it_copies_and_python_m_runs_main(
        folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert ("Copy the rule files, dashboards, Grafana provisioning and Alertmanager config into "
            "the chart.") in " ".join(capsys.readouterr().out.split())
    # As `make chart-files` runs it: a fresh module, the real folders, the committed copies.
    monkeypatch.undo()
    monkeypatch.setattr(sys, "argv", ["sync_chart_files", "--check"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("helm.sync_chart_files", run_name="__main__")
    assert done.value.code == 0 and capsys.readouterr().err == ""
