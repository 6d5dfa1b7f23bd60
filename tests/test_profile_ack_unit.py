"""A trial's answer to a profile request (trial_instrumentation/profile_ack.py): where it is
written, what it holds, that it replaces the last one whole, that another user's directory is
never written to, and which answers a reader takes as new."""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path

import pytest

from trial_instrumentation import profile_ack


def test_the_answer_by_pid_is_in_the_users_runtime_directory_else_the_temporary_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert profile_ack.by_pid(4242) == tmp_path / f"trainwatch-{os.getuid()}" / "profile-4242.json"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "")  # set but empty: the temporary directory
    assert profile_ack.by_pid(7) == (Path(tempfile.gettempdir()) / f"trainwatch-{os.getuid()}"
                                     / "profile-7.json")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert profile_ack.by_pid(7).parent.parent == Path(tempfile.gettempdir())


def test_the_answer_beside_a_trigger_is_named_by_rank() -> None:
    assert profile_ack.beside("/shared/run/profile.now", 3) == Path(
        "/shared/run/profile.now.rank3.json")
    assert profile_ack.beside(Path("/x/t"), "12") == Path("/x/t.rank12.json")


def test_write_puts_the_state_message_time_pid_and_fields_in_every_file_whole(
        tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "one.json", tmp_path / "b" / "c" / "two.json"
    before = time.time()
    profile_ack.write([first, second], profile_ack.WRITTEN, "trace written", trace="/t/x.json",
                      steps=5)
    after = time.time()
    for path in (first, second):
        doc = json.loads(path.read_text())
        assert doc.keys() == {"state", "message", "at", "pid", "trace", "steps"}
        assert (doc["state"], doc["message"], doc["pid"]) == ("written", "trace written",
                                                              os.getpid())
        assert (doc["trace"], doc["steps"]) == ("/t/x.json", 5)
        assert before <= doc["at"] <= after
        # The directory it made is the user's alone; no part file is left behind.
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    profile_ack.write([first], profile_ack.DROPPED, "no torch")  # replaces, not appends
    assert json.loads(first.read_text())["state"] == "dropped"
    assert "trace" not in json.loads(first.read_text())
    assert json.loads(second.read_text())["state"] == "written"


def test_a_directory_owned_by_another_user_is_never_written_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine, theirs = tmp_path / "mine" / "a.json", tmp_path / "theirs" / "a.json"
    theirs.parent.mkdir()
    real_stat = Path.stat

    def owned(path: Path, *args: object, **kwargs: object) -> os.stat_result:
        found = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if path == theirs.parent:  # as if another user owned it
            return os.stat_result((found.st_mode, found.st_ino, found.st_dev, found.st_nlink,
                                   os.getuid() + 1, *found[5:]))
        return found

    monkeypatch.setattr(Path, "stat", owned)
    profile_ack.write([theirs, mine], profile_ack.STARTED, "recording")
    assert not theirs.exists()
    assert list(theirs.parent.iterdir()) == []
    assert json.loads(mine.read_text())["state"] == "started"  # the next file is still written


def test_a_file_that_cannot_be_written_is_skipped_quietly_and_the_rest_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    good = tmp_path / "ok" / "a.json"
    with caplog.at_level(logging.DEBUG, logger="trial_instrumentation.profile_ack"):
        profile_ack.write([blocker / "a.json", good], profile_ack.REFUSED, "busy")
    assert json.loads(good.read_text())["message"] == "busy"
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "cannot write the profile answer" in caplog.records[0].getMessage()


def test_read_takes_an_answer_written_at_or_after_since_and_nothing_else(
        tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    assert profile_ack.read(path, 0.0) is None  # no file
    path.write_text(json.dumps({"state": "written", "message": "m", "at": 100.5}))
    assert profile_ack.read(path, 100.5) == {"state": "written", "message": "m", "at": 100.5}
    assert profile_ack.read(path, 100.0) is not None
    assert profile_ack.read(path, 100.75) is None  # older than the request
    path.write_text(json.dumps({"state": "written", "at": 7}))  # an int time is a time
    assert profile_ack.read(path, 6.5) == {"state": "written", "at": 7}
    for bad in ("{not json", "[1, 2]", '{"at": "100"}', '{"state": "x"}', '"text"'):
        path.write_text(bad)
        assert profile_ack.read(path, 0.0) is None, bad
    assert profile_ack.read(tmp_path, 0.0) is None  # a directory: OSError, no answer


@pytest.mark.parametrize(("owner", "written"), [(0, False), (2000, False), (1000, True)])
def test_only_a_directory_of_the_users_own_uid_is_written_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: int, written: bool) -> None:
    # As user 1000: root's directory (a lower uid), another user's (a higher one), its own.
    # Each uid a separate int object, as the kernel's answers are: equal, never identical.
    monkeypatch.setattr(profile_ack.os, "getuid", lambda: int(str(1000)))
    path = tmp_path / "dir" / "a.json"
    path.parent.mkdir()
    real_stat = Path.stat

    def owned(self: Path, *args: object, **kwargs: object) -> os.stat_result:
        found = real_stat(self, *args, **kwargs)  # type: ignore[arg-type]
        if self == path.parent:
            return os.stat_result((found.st_mode, found.st_ino, found.st_dev, found.st_nlink,
                                   int(str(owner)), *found[5:]))
        return found

    monkeypatch.setattr(Path, "stat", owned)
    profile_ack.write([path], profile_ack.STARTED, "recording")
    assert path.exists() is written
