"""helm.generated.write_or_check, the chart's generated files' one writer: it writes the wanted
text and says nothing, or with ``--check`` writes nothing and names the file and what to run
where the file differs (a missing file differs from any text but the empty one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helm.generated import write_or_check

WANTED = "a: 1\nb: [2, 3]\n"
SOURCE = "python -m helm.something"


def test_without_check_the_file_is_written_whatever_it_held(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "values.schema.json"
    assert write_or_check(path, WANTED, [], "desc", SOURCE) == 0
    assert path.read_text() == WANTED
    path.write_text("stale\n")
    assert write_or_check(path, WANTED, [], "desc", SOURCE) == 0
    assert path.read_text() == WANTED
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("held", [None, "", "a: 1\n", WANTED + "\n", WANTED.upper()])
def test_check_names_a_file_that_differs_and_leaves_it_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], held: str | None) -> None:
    path = tmp_path / "generated.yaml"
    if held is not None:
        path.write_text(held)
    assert write_or_check(path, WANTED, ["--check"], "desc", SOURCE) == 1
    assert capsys.readouterr().out == f"{path}: differs from {SOURCE}\n"
    assert (path.read_text() if path.exists() else None) == held


def test_check_of_a_file_as_wanted_says_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "generated.yaml"
    path.write_text(WANTED)
    before = path.stat().st_mtime_ns
    assert write_or_check(path, WANTED, ["--check"], "desc", SOURCE) == 0
    assert capsys.readouterr().out == "" and path.stat().st_mtime_ns == before
    # Nothing wanted and nothing there agree: a missing file reads as empty.
    assert write_or_check(tmp_path / "absent", "", ["--check"], "desc", SOURCE) == 0
    assert not (tmp_path / "absent").exists()


def test_help_shows_the_description_and_an_unknown_flag_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        write_or_check(tmp_path / "x", WANTED, ["--help"], "Render the chart's schema.", SOURCE)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Render the chart's schema." in out and "report drift, write nothing" in out
    with pytest.raises(SystemExit) as done:
        write_or_check(tmp_path / "x", WANTED, ["--chek"], "desc", SOURCE)
    assert done.value.code == 2 and not (tmp_path / "x").exists()
