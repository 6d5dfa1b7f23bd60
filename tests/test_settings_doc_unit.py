"""docs/instrumentation.md's settings table (trial_instrumentation/settings_doc.py), in process:
how each kind of default is shown, who sets a scheduler's variable, each column of a row, the
table replaced between its markers only, and --check's answer."""

from __future__ import annotations

from dataclasses import Field, fields, make_dataclass
from pathlib import Path
from typing import Any

import pytest

from trial_instrumentation import settings_doc
from trial_instrumentation.config import _setting


def _fields(**declared: Any) -> list[Field[Any]]:
    """Fields declared with config's own ``_setting``, in the given order."""
    cls = make_dataclass("Fake", [(name, Any, spec) for name, spec in declared.items()])
    return list(fields(cls))


def _one(default: Any, **kw: Any) -> Field[Any]:
    return _fields(x=_setting(default, str, "doc", **kw))[0]


def test_each_kind_of_default_is_shown_its_own_way() -> None:
    assert settings_doc.shown(_one(5, shown="text as given")) == "text as given"
    assert settings_doc.shown(_one(7, shown=lambda d: f"<{d * 3}>")) == "<21>"
    assert settings_doc.shown(_one(lambda: 4, shown=lambda d: f"f{d}")) == "f4"  # a factory's value
    assert settings_doc.shown(_one(None, required=True)) == "required when enabled"
    assert settings_doc.shown(_one("x", required=True)) == "required when enabled"
    assert settings_doc.shown(_one(None)) == "unset"
    assert settings_doc.shown(_one(10)) == "`10`"
    assert settings_doc.shown(_one(0.25)) == "`0.25`"
    assert settings_doc.shown(_one(2.0)) == "`2`"  # :g, not 2.0
    assert settings_doc.shown(_one(1e-7)) == "`1e-07`"
    assert settings_doc.shown(_one(0)) == "`0`"  # zero is a default, not unset
    assert settings_doc.shown(_one("")) == "``"
    assert settings_doc.shown(_one("auto")) == "`auto`"
    assert settings_doc.shown(_one(lambda: "made")) == "`made`"


def test_a_shown_function_is_given_the_default_even_when_it_is_none_or_required() -> None:
    assert settings_doc.shown(_one(None, shown=lambda d: f"[{d}]")) == "[None]"
    assert settings_doc.shown(_one(3, required=True, shown=lambda d: f"[{d}]")) == "[3]"
    assert settings_doc.shown(_one(3, required=True, shown="words")) == "words"


def test_a_scheduler_variable_names_torchrun_or_slurm_and_others_nobody() -> None:
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        assert settings_doc._scheduler(variable) == " (torchrun)"
    assert settings_doc._scheduler("SLURM_PROCID") == " (Slurm)"
    assert settings_doc._scheduler("SLURM_") == " (Slurm)"
    for variable in ("TRAINWATCH_RANK", "MY_SLURM_X", "slurm_procid", "RANKS", ""):
        assert settings_doc._scheduler(variable) == ""


def test_each_row_has_its_variable_fallback_argument_default_and_meaning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    declared = _fields(
        plain=_setting(3, int, "a plain one", env="TRAINWATCH_PLAIN"),
        ranked=_setting(0, int, "the rank", env="TRAINWATCH_R", fallback="SLURM_PROCID"),
        torch=_setting(0, int, "torch's", env="RANK", fallback="OTHER_VAR"),
        hidden=_setting("h", str, "no argument", env="TRAINWATCH_H", argument=False),
        nowhere=_setting(None, str, "argument only"),
    )
    monkeypatch.setattr(settings_doc, "settings", lambda: declared)
    assert settings_doc.table().splitlines() == [
        "| variable | argument | default | meaning |",
        "|---|---|---|---|",
        "| `TRAINWATCH_PLAIN` | `plain` | `3` | a plain one |",
        "| `TRAINWATCH_R`, else `SLURM_PROCID` (Slurm) | `ranked` | `0` | the rank |",
        "| `RANK` (torchrun), else `OTHER_VAR` | `torch` | `0` | torch's |",
        "| `TRAINWATCH_H` | – | `h` | no argument |",
        "| – | `nowhere` | unset | argument only |",
    ]


def test_the_real_table_has_a_row_per_setting_in_order() -> None:
    rows = settings_doc.table().splitlines()[2:]
    names = [s.name for s in settings_doc.settings()]
    assert len(rows) == len(names)
    assert [r.split(" | ")[1] for r in rows][:3] == [
        f"`{n}`" if s.metadata["argument"] else "–" for n, s in zip(names[:3], settings_doc.settings())]


def test_rewritten_replaces_only_what_lies_between_the_markers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_doc, "table", lambda: "NEW\nTABLE")
    b, e = settings_doc.BEGIN, settings_doc.END
    text = f"head\n{b}\nold row\nold row 2\n{e}\ntail {e} again\n"
    assert settings_doc.rewritten(text) == f"head\n{b}\nNEW\nTABLE\n{e}\ntail {e} again\n"
    assert settings_doc.rewritten(f"{b}\n{e}") == f"{b}\nNEW\nTABLE\n{e}"


def test_rewritten_refuses_text_without_either_marker() -> None:
    b, e = settings_doc.BEGIN, settings_doc.END
    for text in (f"head\n{e}\n", f"head\n{b}\nrows\n", "nothing", f"{b}{e}", f"{e}\n{b}\n"):
        with pytest.raises(ValueError, match="markers .* are missing"):
            settings_doc.rewritten(text)


def _doc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> Path:
    doc = tmp_path / "instrumentation.md"
    doc.write_text(body)
    monkeypatch.setattr(settings_doc, "DOC", doc)
    monkeypatch.setattr(settings_doc, "table", lambda: "| t |")
    return doc


def test_check_says_whether_the_file_is_current_and_writes_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    b, e = settings_doc.BEGIN, settings_doc.END
    current = f"a\n{b}\n| t |\n{e}\nz\n"
    doc = _doc(monkeypatch, tmp_path, current)
    assert settings_doc.main(["--check"]) == 0
    assert capsys.readouterr().err == ""
    stale = f"a\n{b}\n| old |\n{e}\nz\n"
    doc.write_text(stale)
    assert settings_doc.main(["--check"]) == 1
    assert "is out of date: run python -m trial_instrumentation.settings_doc" in capsys.readouterr().err
    assert doc.read_text() == stale


def test_without_check_the_file_is_rewritten(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    b, e = settings_doc.BEGIN, settings_doc.END
    doc = _doc(monkeypatch, tmp_path, f"a\n{b}\n| old |\n{e}\nz\n")
    assert settings_doc.main([]) == 0
    assert doc.read_text() == f"a\n{b}\n| t |\n{e}\nz\n"
    assert capsys.readouterr().err == ""
    assert settings_doc.main([]) == 0  # already current: unchanged
    assert doc.read_text() == f"a\n{b}\n| t |\n{e}\nz\n"


def test_the_repositorys_table_is_current() -> None:
    root = Path(__file__).resolve().parent.parent
    text = (root / settings_doc.DOC).read_text()
    assert settings_doc.rewritten(text) == text


def test_check_finds_a_stale_table_whichever_way_it_sorts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    b, e = settings_doc.BEGIN, settings_doc.END
    for old in ("| a |", "| z |", "| t | extra |", ""):  # before and after "| t |"
        _doc(monkeypatch, tmp_path, f"a\n{b}\n{old}\n{e}\nz\n")
        assert settings_doc.main(["--check"]) == 1, old


def test_help_describes_the_command_by_the_docstrings_first_paragraph(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings_doc.main(["--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Write docs/instrumentation.md's settings table from the settings declared in" in out
    assert "# rewrite the table" not in out and ">>>" not in out


def test_run_as_a_module_it_checks_and_exits_with_the_answer(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import runpy
    import sys
    (tmp_path / "docs").mkdir()
    stale = f"{settings_doc.BEGIN}\n| stale |\n{settings_doc.END}\n"
    (tmp_path / "docs" / "instrumentation.md").write_text(stale)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["settings_doc", "--check"])
    monkeypatch.delitem(sys.modules, "trial_instrumentation.settings_doc")  # runpy's own copy
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("trial_instrumentation.settings_doc", run_name="__main__")
    assert exited.value.code == 1
    assert (tmp_path / "docs" / "instrumentation.md").read_text() == stale
