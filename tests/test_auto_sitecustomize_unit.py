"""trial_instrumentation/auto/site/sitecustomize.py in process: loaded as the interpreter would
(its file executed as a module), with ``TRAINWATCH_AUTO`` and ``sys.path`` set per test. Unset
or ``0``: no finder is added; set: one watcher, first on ``sys.meta_path``, that runs its hook
once, after the watched module has executed, and leaves every other import alone. Either way
the next ``sitecustomize`` on ``sys.path`` (never this one again) runs after it. A hook that
fails costs one stderr line and nothing else."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trial_instrumentation import auto

SITE = Path(auto.__file__).resolve().parent / "site"
HOOKS = {"torch": "on_torch", "lightning.pytorch.trainer.trainer": "on_lightning",
         "transformers.trainer": "on_transformers"}


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """sys.meta_path, sys.path and the "sitecustomize" module put back after each test."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    monkeypatch.delenv("TRAINWATCH_AUTO", raising=False)


def load(path: list[str], auto_setting: str | None = None) -> ModuleType:
    """The site's sitecustomize executed with ``sys.path`` = ``path`` and ``TRAINWATCH_AUTO``."""
    sys.path[:] = path
    if auto_setting is not None:
        os.environ["TRAINWATCH_AUTO"] = auto_setting
    spec = importlib.util.spec_from_file_location("trainwatch_site", SITE / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def watchers() -> list[Any]:
    return [f for f in sys.meta_path if type(f).__name__ == "_Watch"]


def user_site(where: Path, text: str = "USER = 'mine'\n") -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(text)
    return where


@pytest.mark.parametrize(("setting", "enabled"), [
    (None, False), ("", False), ("0", False), (" 0 ", False), ("  ", False),
    ("1", True), (" 1\n", True), ("00", True), ("yes", True)])
def test_trainwatch_auto_unset_empty_or_zero_adds_no_finder(
        setting: str | None, enabled: bool) -> None:
    before = list(sys.meta_path)
    module = load([str(SITE)], setting)
    assert module._enabled() is enabled
    if not enabled:
        assert sys.meta_path == before
        return
    assert sys.meta_path[1:] == before and len(watchers()) == 1
    watch = sys.meta_path[0]
    assert isinstance(watch, module._Watch) and watch.hooks == HOOKS
    assert all(callable(getattr(auto, hook)) for hook in HOOKS.values())


def test_a_watched_module_runs_its_hook_once_after_it_executed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load([str(SITE)])
    (tmp_path / "tw_watched_a.py").write_text("VALUE = 41\n")
    sys.path[:] = [str(tmp_path)]
    seen: list[tuple[ModuleType, int]] = []
    monkeypatch.setattr(auto, "on_test", lambda m: seen.append((m, m.VALUE)), raising=False)
    watch = module._Watch({"tw_watched_a": "on_test", "tw_other": "on_test"})
    sys.meta_path.insert(0, watch)
    monkeypatch.delitem(sys.modules, "tw_watched_a", raising=False)
    imported = importlib.import_module("tw_watched_a")
    assert seen == [(imported, 41)]
    assert imported.__file__ == str(tmp_path / "tw_watched_a.py")
    assert watch.hooks == {"tw_other": "on_test"}  # the watched one's hook is used up
    assert "exec_module" not in vars(imported.__spec__.loader)  # its loader as it was
    del sys.modules["tw_watched_a"]
    again = importlib.import_module("tw_watched_a")
    assert again is not imported and seen == [(imported, 41)]  # once only
    assert capsys.readouterr().err == ""


def test_other_imports_are_left_to_the_other_finders(tmp_path: Path) -> None:
    module = load([str(SITE)])
    watch = module._Watch({"torch": "on_torch"})
    assert watch.find_spec("tw_unwatched", None) is None
    assert watch.find_spec("json", None) is None
    assert watch.hooks == {"torch": "on_torch"}


def test_finders_without_find_spec_are_passed_over(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module = load([str(SITE)])
    (tmp_path / "tw_watched_b.py").write_text("VALUE = 2\n")
    sys.path[:] = [str(tmp_path)]
    seen: list[int] = []
    monkeypatch.setattr(auto, "on_test", lambda m: seen.append(m.VALUE), raising=False)
    watch = module._Watch({"tw_watched_b": "on_test"})
    sys.meta_path[:0] = [watch, object()]  # a finder of an old kind: find_module only
    monkeypatch.delitem(sys.modules, "tw_watched_b", raising=False)
    spec = watch.find_spec("tw_watched_b", None)
    assert spec is not None and spec.origin == str(tmp_path / "tw_watched_b.py")
    assert "exec_module" in vars(spec.loader)  # wrapped until it runs
    target = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(target)
    assert seen == [2] and target.VALUE == 2


def test_a_watched_module_nobody_finds_is_none_and_its_hook_is_gone(tmp_path: Path) -> None:
    module = load([str(SITE)])
    sys.path[:] = [str(tmp_path)]
    watch = module._Watch({"tw_missing": "on_test"})
    sys.meta_path.insert(0, watch)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tw_missing")
    assert watch.hooks == {}


class Legacy:
    """A loader of an old kind: load_module, no exec_module."""

    def load_module(self, name: str) -> ModuleType:
        return ModuleType(name)


class LegacyFinder:
    def __init__(self) -> None:
        self.spec = importlib.machinery.ModuleSpec("tw_legacy", Legacy())

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        return self.spec if fullname == "tw_legacy" else None


def test_a_spec_whose_loader_has_no_exec_module_is_returned_as_found() -> None:
    module = load([str(SITE)])
    finder = LegacyFinder()
    watch = module._Watch({"tw_legacy": "on_test"})
    sys.meta_path[:0] = [watch, finder]
    assert watch.find_spec("tw_legacy", None) is finder.spec
    assert not hasattr(finder.spec.loader, "exec_module")


def test_the_wrapped_exec_module_run_again_still_runs_its_hook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper removes itself from its loader at its first run; run again (held by
    someone), there is nothing left to remove and it goes on."""
    module = load([str(SITE)])
    (tmp_path / "tw_watched_c.py").write_text("VALUE = 3\n")
    sys.path[:] = [str(tmp_path)]
    seen: list[ModuleType] = []
    monkeypatch.setattr(auto, "on_test", seen.append, raising=False)
    watch = module._Watch({"tw_watched_c": "on_test"})
    sys.meta_path.insert(0, watch)
    spec = watch.find_spec("tw_watched_c", None)
    assert spec is not None
    wrapper = spec.loader.exec_module
    first, second = (importlib.util.module_from_spec(spec) for _ in range(2))
    wrapper(first)
    wrapper(second)
    assert seen == [first, second] and second.VALUE == 3


def test_a_failing_hook_is_one_line_on_stderr_and_no_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    module = load([str(SITE)])

    def broken(m: ModuleType) -> None:
        raise ValueError(f"cannot patch {m.__name__}")

    monkeypatch.setattr(auto, "on_test", broken, raising=False)
    module._run("on_test", ModuleType("torch"))
    module._run("on_nothing_such", ModuleType("torch"))
    called: list[ModuleType] = []
    monkeypatch.setattr(auto, "on_test", called.append, raising=False)
    target = ModuleType("torch")
    module._run("on_test", target)
    assert called == [target]
    assert capsys.readouterr().err == (
        "trainwatch: automatic instrumentation disabled in this process: ValueError: cannot "
        "patch torch\n"
        "trainwatch: automatic instrumentation disabled in this process: AttributeError: "
        "module 'trial_instrumentation.auto' has no attribute 'on_nothing_such'\n")


def test_the_next_sitecustomize_runs_as_the_one_imported(tmp_path: Path) -> None:
    user = user_site(tmp_path / "user")
    later = user_site(tmp_path / "later", "USER = 'later'\n")
    load([str(SITE), str(user), str(later)], "1")
    chained = sys.modules["sitecustomize"]
    assert chained.USER == "mine" and chained.__file__ == str(user / "sitecustomize.py")


def test_with_no_other_sitecustomize_nothing_is_chained() -> None:
    load([str(SITE)])
    assert "sitecustomize" not in sys.modules


@pytest.mark.parametrize("entry", ["", "site", "site/", "../site/."])
def test_this_directory_is_never_chained_to_itself_however_it_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """"" is the current directory; a relative entry is read from it."""
    user = user_site(tmp_path / "user")
    monkeypatch.chdir(SITE if entry == "" else SITE.parent if entry.startswith("s") else SITE)
    load([entry, str(SITE), str(user)])
    assert sys.modules["sitecustomize"].__file__ == str(user / "sitecustomize.py")


def test_a_namespace_package_named_sitecustomize_is_not_run(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize").mkdir()  # a directory with no __init__: no loader
    load([str(SITE), str(tmp_path)])
    assert "sitecustomize" not in sys.modules


def test_a_sitecustomize_in_a_directory_sorting_after_this_one_is_chained(tmp_path: Path) -> None:
    """Only this directory is left out, not every path that sorts after it."""
    later = Path(tempfile.mkdtemp(prefix="zz_chained_", dir=SITE.parent))
    try:
        assert str(later) > str(SITE)
        user_site(later)
        load([str(SITE), str(later)])
        assert sys.modules["sitecustomize"].__file__ == str(later / "sitecustomize.py")
    finally:
        shutil.rmtree(later)
