"""What the Helm chart's init container copies for automatic instrumentation
(trial_instrumentation/auto/bundle.py), in process: the PYTHONPATH it prints, where a package is
found, a copy with no bytecode, readable by any user, that replaces an older one whole, and the
command's usage."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

import trial_instrumentation
from trial_instrumentation.auto import bundle


def test_the_site_directory_comes_first_then_dest() -> None:
    assert bundle.pythonpath("/opt/tw") == ["/opt/tw/trial_instrumentation/auto/site", "/opt/tw"]
    assert bundle.pythonpath("rel/d/") == ["rel/d/trial_instrumentation/auto/site", "rel/d"]
    assert bundle.PACKAGES == ("trial_instrumentation", "prometheus_client")


def test_a_package_is_found_where_it_is_imported_from() -> None:
    assert bundle.package_dir("trial_instrumentation") == Path(trial_instrumentation.__file__).parent
    assert (bundle.package_dir("trial_instrumentation") / bundle.SITE.relative_to(
        "trial_instrumentation") / "sitecustomize.py").is_file()


@pytest.mark.parametrize("name", ["no_such_package_tw_36", "stat"], ids=["missing", "a-module"])
def test_what_is_not_an_installed_package_stops_the_command(name: str) -> None:
    with pytest.raises(SystemExit, match=f"trainwatch: package {name} is not installed here"):
        bundle.package_dir(name)


def _package(root: Path, name: str) -> None:
    """A package with a subpackage, bytecode and modes only its owner may read."""
    (root / name / "sub" / "__pycache__").mkdir(parents=True)
    (root / name / "__pycache__").mkdir()
    (root / name / "__init__.py").write_text(f"NAME = {name!r}\n")
    (root / name / "sub" / "__init__.py").write_text("")
    (root / name / "sub" / "data.txt").write_text("kept")
    (root / name / "stray.pyc").write_bytes(b"\0")
    (root / name / "sub" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / name / "__pycache__" / "y.cpython-311.pyc").write_bytes(b"\0")
    for path in (root / name).rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    (root / name).chmod(0o700)


@pytest.fixture
def packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for name in ("tw_pkg_b", "tw_pkg_a"):
        _package(src, name)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setattr(bundle, "PACKAGES", ("tw_pkg_b", "tw_pkg_a"))
    return tmp_path / "deep" / "dest"


def test_every_package_is_copied_without_bytecode_readable_by_anyone(packages: Path) -> None:
    assert bundle.bundle(packages) == [packages / "tw_pkg_b", packages / "tw_pkg_a"]
    for name in ("tw_pkg_b", "tw_pkg_a"):
        copied = {p.relative_to(packages / name).as_posix(): p for p in (packages / name).rglob("*")}
        assert sorted(copied) == ["__init__.py", "sub", "sub/__init__.py", "sub/data.txt"]
        assert (packages / name / "sub" / "data.txt").read_text() == "kept"
        assert stat.S_IMODE((packages / name).stat().st_mode) in (0o700, 0o755)  # as copied
        for path in copied.values():
            assert stat.S_IMODE(path.stat().st_mode) == (0o755 if path.is_dir() else 0o644), path


def test_an_older_copy_is_replaced_whole(packages: Path) -> None:
    (packages / "tw_pkg_a" / "gone").mkdir(parents=True)
    (packages / "tw_pkg_a" / "gone" / "old.py").write_text("")
    (packages / "tw_pkg_a" / "old.py").write_text("")
    (packages / "other").mkdir()
    bundle.bundle(packages)
    assert not (packages / "tw_pkg_a" / "old.py").exists()
    assert not (packages / "tw_pkg_a" / "gone").exists()
    assert (packages / "other").is_dir()  # what is not ours stays
    assert bundle.bundle(packages) == [packages / "tw_pkg_b", packages / "tw_pkg_a"]  # again


def test_the_command_copies_and_prints_the_pythonpath(
        packages: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bundle.main([str(packages)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"trainwatch: copied {packages / 'tw_pkg_b'}",
        f"trainwatch: copied {packages / 'tw_pkg_a'}",
        f"PYTHONPATH={packages}/trial_instrumentation/auto/site:{packages}"]
    assert err == ""
    other = packages.parent / "from-argv"
    monkeypatch.setattr(sys, "argv", ["bundle", str(other)])
    assert bundle.main() == 0
    assert (other / "tw_pkg_a" / "__init__.py").is_file()
    assert capsys.readouterr().out.endswith(f"PYTHONPATH={other}/trial_instrumentation/auto/site:{other}\n")


@pytest.mark.parametrize("argv", [[], ["a", "b"]], ids=["none", "two"])
def test_the_command_takes_exactly_one_destination(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bundle", "x"])  # not read when argv is given
    assert bundle.main(argv) == 2
    assert capsys.readouterr() == (
        "", "usage: python -m trial_instrumentation.auto.bundle DEST\n")
    assert list(tmp_path.iterdir()) == []


def test_run_as_a_module_it_exits_with_mains_answer(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    monkeypatch.setattr(sys, "argv", ["bundle"])  # no DEST: usage, 2
    monkeypatch.delitem(sys.modules, "trial_instrumentation.auto.bundle")  # runpy's own copy
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("trial_instrumentation.auto.bundle", run_name="__main__")
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("usage: ")
