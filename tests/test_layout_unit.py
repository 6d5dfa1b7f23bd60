"""trainwatch.layout: where the state directory is, the files under it, each way preparing it
fails (one line saying what to do), the lock `up` and `down` hold, the project's own files and
the hint that puts the `trainwatch` command on PATH."""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import pytest

from tests.frozen import assert_frozen
from trainwatch import layout
from trainwatch.layout import (
    ENV_STATE_DIR,
    REPO,
    StackError,
    StateDir,
    default_state_dir,
    path_hint,
    project_file,
)


def test_the_state_directory_is_the_variable_then_xdg_then_the_home_default(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir({ENV_STATE_DIR: "/s/t", "XDG_STATE_HOME": "/x"}) == Path("/s/t")
    assert default_state_dir({ENV_STATE_DIR: "~/tw"}) == tmp_path / "home" / "tw"
    assert default_state_dir({ENV_STATE_DIR: "", "XDG_STATE_HOME": "/x"}) == Path("/x/trainwatch")
    assert default_state_dir({"XDG_STATE_HOME": ""}) == \
        tmp_path / "home" / ".local" / "state" / "trainwatch"
    assert default_state_dir({}) == tmp_path / "home" / ".local" / "state" / "trainwatch"
    monkeypatch.setenv(ENV_STATE_DIR, "/from/the/process")
    assert default_state_dir() == Path("/from/the/process")


def test_resolve_takes_a_given_directory_made_absolute_else_the_default(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert StateDir.resolve("rel/dir") == StateDir(tmp_path / "rel" / "dir")
    assert StateDir.resolve(Path("~/s")) == StateDir(tmp_path / "home" / "s")
    assert StateDir.resolve(None, {ENV_STATE_DIR: "env/dir"}) == StateDir(tmp_path / "env/dir")
    assert StateDir.resolve("", {ENV_STATE_DIR: "/e"}) == StateDir(Path("/e"))
    assert StateDir.resolve("/g", {ENV_STATE_DIR: "/e"}) == StateDir(Path("/g"))


def test_each_file_has_its_place_under_the_root() -> None:
    state = StateDir(Path("/tw"))
    assert (state.run_dir, state.logs, state.settings_file) == (
        Path("/tw/run"), Path("/tw/logs"), Path("/tw/stack.json"))
    assert state.pid_file("prometheus") == Path("/tw/run/prometheus.pid")
    assert state.log_file("grafana") == Path("/tw/logs/grafana.log")
    assert state.data("pushgateway") == Path("/tw/pushgateway")
    assert_frozen(state)


def test_prepare_makes_the_tree_and_leaves_no_probe_behind(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "a" / "b")
    assert not state.exists()
    state.prepare()
    assert state.exists() and state.run_dir.is_dir() and state.logs.is_dir()
    assert sorted(p.name for p in state.root.iterdir()) == ["logs", "run"]
    state.prepare()  # again: nothing changes
    assert sorted(p.name for p in state.root.iterdir()) == ["logs", "run"]


def test_a_file_in_place_of_the_directory_is_an_error_not_absent(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "f")
    state.root.write_text("")
    said = (f"state directory {state.root} is a file, not a directory; pass --state-dir DIR "
            f"or set {ENV_STATE_DIR}")
    with pytest.raises(StackError) as caught:
        state.exists()
    assert str(caught.value) == said
    with pytest.raises(StackError) as caught:
        state.prepare()
    assert str(caught.value) == said


def test_a_file_above_the_directory_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    state = StateDir(tmp_path / "file" / "tw")
    assert not state.exists()
    with pytest.raises(StackError) as caught:
        state.prepare()
    assert str(caught.value) == (f"state directory {state.root}: a parent of it is a file; "
                                 f"pass --state-dir DIR or set {ENV_STATE_DIR}")


def test_a_directory_that_cannot_be_written_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Path, data: bytes) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_bytes", refuse)
    state = StateDir(tmp_path / "ro")
    with pytest.raises(StackError) as caught:
        state.prepare()
    assert str(caught.value) == (f"state directory {state.root} is not writable (Permission "
                                 f"denied); pass --state-dir DIR or set {ENV_STATE_DIR}")


def test_forget_removes_a_record_and_never_fails(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.prepare()
    state.pid_file("a").write_text("{}")
    state.pid_file("b").write_text("{}")
    state.forget("a")
    assert not state.pid_file("a").exists() and state.pid_file("b").exists()
    state.forget("a")  # gone already
    state.pid_file("c").mkdir()  # cannot be unlinked
    state.forget("c")
    assert state.pid_file("c").is_dir()


def test_the_lock_is_held_inside_and_refuses_a_second_holder(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.prepare()
    with state.locked():
        with open(state.run_dir / "lock") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StackError) as caught, state.locked():
            pass
        assert str(caught.value) == (f"another `trainwatch stack` command is working on "
                                     f"{state.root}; wait for it to finish")
    with open(state.run_dir / "lock") as other:  # released on the way out
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with state.locked():
        pass


def test_without_a_run_directory_the_lock_is_skipped_and_the_body_runs(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "none")
    ran = []
    with state.locked():
        ran.append(1)
    assert ran == [1] and not state.root.exists()


def test_a_project_file_is_found_in_the_checkout_or_says_how_to_get_one() -> None:
    assert project_file("prometheus/alertmanager/templates") == \
        REPO / "prometheus/alertmanager/templates"
    assert REPO == Path(layout.__file__).resolve().parent.parent
    with pytest.raises(StackError) as caught:
        project_file("no/such/file")
    assert str(caught.value) == (f"{REPO / 'no/such/file'} not found: `trainwatch stack` runs "
                                 "from a trainwatch checkout (git clone, then `make run`)")


def test_the_path_hint_names_the_installs_command_when_the_shell_finds_another_or_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    found: list[str | None] = [None]
    monkeypatch.setattr(layout.shutil, "which", lambda name: found[0] if name == "trainwatch"
                        else "/wrong")
    assert path_hint() is None  # no script installed
    (bin_dir / "trainwatch").mkdir()
    assert path_hint() is None  # not a file
    (bin_dir / "trainwatch").rmdir()
    (bin_dir / "trainwatch").write_text("#!/bin/sh\n")
    hint = (f"`trainwatch` is not on your PATH: `source {bin_dir / 'activate'}` puts it there "
            f"(or run {bin_dir / 'trainwatch'})")
    assert path_hint() == hint
    found[0] = "/usr/local/bin/trainwatch"
    assert path_hint() == hint
    found[0] = "/a/bin/trainwatch"  # another, sorting before this install's path
    assert path_hint() == hint
    found[0] = str(bin_dir / "trainwatch")
    assert path_hint() is None
    os.symlink(bin_dir / "trainwatch", tmp_path / "link")
    found[0] = str(tmp_path / "link")  # the same script through a link
    assert path_hint() is None
