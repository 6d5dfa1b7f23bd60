"""exporter.webreload in process: what build() makes of the settings, the file stamps, when a
LiveWebConfig looks at its files and reloads, what it logs, and SIGHUP (a signal of this
process). The same over real exporter processes: tests/test_exporter_web_reload.py."""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from exporter import webreload
from exporter.config import ConfigError, Settings
from exporter.webauth import BasicAuth, Verdict, hash_password
from exporter.webreload import RELOADED, LiveWebConfig, build, stamp

HERE = Path(__file__).parent
CERT, KEY = str(HERE / "test_exporter_tls.crt"), str(HERE / "test_exporter_tls.key")
CERT_B, KEY_B = (str(HERE / "test_exporter_tls_renewed.crt"),
                 str(HERE / "test_exporter_tls_renewed.key"))
ALICE = hash_password("a1", iterations=100, salt="s1")
BOB = hash_password("b1", iterations=100, salt="s2")


def login(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Reread:
    """The settings a reload reads: set ``now`` (or ``error``); counts its calls."""

    def __init__(self, settings: Settings) -> None:
        self.now, self.error, self.calls = settings, None, 0

    def __call__(self) -> Settings:
        self.calls += 1
        if self.error is not None:
            raise ConfigError(self.error)
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == webreload.__name__]


def test_build_without_users_or_tls_serves_plain_and_open() -> None:
    config = build(Settings())
    assert config.auth is None and config.context is None and config.settings == Settings()


def test_build_makes_the_users_and_the_tls_context() -> None:
    settings = Settings(web_basic_auth_users={"alice": ALICE}, web_tls_cert_file=CERT,
                        web_tls_key_file=KEY)
    config = build(settings)
    assert isinstance(config.auth, BasicAuth) and config.context is not None
    assert config.auth.verify(login("alice", "a1")) is Verdict.OK
    assert config.auth.verify(login("alice", "wrong")) is Verdict.DENIED


def test_build_renews_the_previous_users_keeping_unchanged_passwords_verified() -> None:
    first = build(Settings(web_basic_auth_users={"alice": ALICE, "bob": BOB}))
    assert first.auth is not None
    auth = BasicAuth({"alice": ALICE, "bob": BOB}, burst=2, per_second=0.0)
    previous = webreload.WebConfig(first.settings, auth, None)
    assert auth.verify(login("alice", "a1")) is Verdict.OK
    assert auth.verify(login("bob", "b1")) is Verdict.OK  # the client's budget is spent now
    again = build(Settings(web_basic_auth_users={"alice": ALICE}), previous)
    assert again.auth is not None and again.auth is not auth
    assert again.auth.verify(login("alice", "a1")) is Verdict.OK  # remembered, no budget
    assert again.auth.verify(login("bob", "b1")) is not Verdict.OK
    fresh = build(Settings(web_basic_auth_users={"alice": ALICE}),
                  webreload.WebConfig(Settings(), None, None))
    assert fresh.auth is not None and fresh.auth.verify(login("alice", "a1")) is Verdict.OK


def test_a_reload_renews_the_users_it_serves_keeping_budgets_and_verified_passwords() -> None:
    settings = Settings(web_basic_auth_users={"alice": ALICE, "bob": BOB})
    live = LiveWebConfig(settings, Reread(settings))
    auth = live.current().auth
    assert auth is not None
    assert auth.verify(login("alice", "a1"), "flood") is Verdict.OK
    tries = [auth.verify(login("bob", "guess"), "flood") for _ in range(20)]
    assert tries[-1] is Verdict.BUSY and Verdict.DENIED in tries  # the flood's budget is spent
    assert live.reload()
    renewed = live.current().auth
    assert renewed is not None and renewed is not auth
    assert renewed.verify(login("bob", "guess"), "flood") is Verdict.BUSY  # not a fresh budget
    assert renewed.verify(login("alice", "a1"), "flood") is Verdict.OK  # remembered: no hash
    assert renewed.verify(login("bob", "guess"), "other") is Verdict.DENIED


def test_build_names_a_bad_certificate() -> None:
    with pytest.raises(ConfigError, match="web.tls_cert_file: /nope.crt"):
        build(Settings(web_tls_cert_file="/nope.crt", web_tls_key_file=KEY))


def test_a_stamp_is_each_files_identity_size_and_time(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("x")
    info = os.stat(path)
    assert stamp([str(path), str(tmp_path / "absent"), str(path)]) == (
        (info.st_dev, info.st_ino, 1, info.st_mtime_ns), (-1, -1, -1, -1),
        (info.st_dev, info.st_ino, 1, info.st_mtime_ns))
    assert stamp([]) == ()
    path.write_text("longer")
    assert stamp([str(path)])[0][2] == 6


def test_the_reloaded_settings() -> None:
    assert RELOADED == ("web_basic_auth_users", "web_tls_cert_file", "web_tls_key_file")


def test_between_looks_nothing_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("a")
    reread = Reread(Settings())
    live = LiveWebConfig(Settings(), reread, str(path), interval=3600.0)
    first = live.current()
    path.write_text("changed")
    assert live.current() is first and reread.calls == 0


def test_a_look_reads_again_only_when_a_file_changed(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.yml"
    path.write_text("a")
    reread = Reread(Settings(web_basic_auth_users={"alice": ALICE}))
    live = LiveWebConfig(Settings(), reread, str(path), interval=0.0)
    first = live.current()
    assert first.auth is None and reread.calls == 0
    path.write_text("bb")
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        second = live.current()
        assert live.current() is second
    assert second.auth is not None and reread.calls == 1
    assert messages(caplog) == [
        (logging.INFO, "web config reloaded (the files changed): 1 basic-auth user(s), TLS off")]


def test_a_refused_config_keeps_the_last_good_one_and_says_so_once_per_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.yml"
    path.write_text("a")
    reread = Reread(Settings())
    live = LiveWebConfig(Settings(), reread, str(path), interval=0.0)
    good = live.current()
    reread.error = "config file c.yml: log.level must be one of debug"
    path.write_text("bb")
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        for _ in range(5):
            assert live.current() is good
        assert reread.calls == 1  # the refused files are not read again until they change
        path.write_text("ccc")
        assert live.current() is good and reread.calls == 2
        reread.error = None
        reread.now = Settings(web_basic_auth_users={"alice": ALICE, "bob": BOB})
        path.write_text("dddd")
        assert live.current().auth is not None and reread.calls == 3
    warning = ("web config not reloaded (the files changed), still serving the last good one: "
               "config file c.yml: log.level must be one of debug")
    assert messages(caplog) == [
        (logging.WARNING, warning), (logging.WARNING, warning),
        (logging.INFO, "web config reloaded (the files changed): 2 basic-auth user(s), TLS off")]


def test_a_forced_reload_reads_and_logs_every_time(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    reread = Reread(Settings())
    live = LiveWebConfig(Settings(), reread, None, interval=3600.0)
    reread.error = "x" * 1000
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        assert live.reload() is False
        assert live.reload("SIGUSR2") is False
        reread.error = None
        assert live.reload() is True
    said = messages(caplog)
    assert said[0] == (logging.WARNING, "web config not reloaded (SIGHUP), still serving the "
                                        "last good one: " + "x" * 397 + "...")
    assert said[1][1].startswith("web config not reloaded (SIGUSR2)")
    assert said[2] == (logging.INFO, "web config reloaded (SIGHUP): 0 basic-auth user(s), TLS off")
    assert reread.calls == 3


@pytest.mark.parametrize(("before", "after"), [
    (Settings(), Settings(web_tls_cert_file=CERT, web_tls_key_file=KEY)),
    (Settings(web_tls_cert_file=CERT, web_tls_key_file=KEY), Settings())])
def test_switching_tls_on_or_off_needs_a_restart(before: Settings, after: Settings,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    live = LiveWebConfig(before, Reread(after), None)
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        assert live.reload() is False
    assert live.current().settings is before
    assert messages(caplog) == [(logging.WARNING, ("web config not reloaded (SIGHUP), still "
                                 "serving the last good one: switching TLS on or off needs a "
                                 "restart"))]


def test_a_renewed_certificate_is_loaded_and_named(caplog: pytest.LogCaptureFixture) -> None:
    before = Settings(web_tls_cert_file=CERT, web_tls_key_file=KEY)
    after = Settings(web_tls_cert_file=CERT_B, web_tls_key_file=KEY_B)
    live = LiveWebConfig(before, Reread(after), None)
    old = live.current().context
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        assert live.reload() is True
    assert live.current().context is not old and live.current().settings is after
    assert messages(caplog) == [(logging.INFO, ("web config reloaded (SIGHUP): 0 basic-auth "
                                 f"user(s), TLS certificate {CERT_B}"))]


def test_settings_that_need_a_restart_are_named(caplog: pytest.LogCaptureFixture) -> None:
    after = Settings(log_level="debug", web_listen_address="127.0.0.1:1",
                     web_basic_auth_users={"alice": ALICE})
    live = LiveWebConfig(Settings(), Reread(after), None)
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        assert live.reload() is True
    assert messages(caplog) == [(logging.INFO, ("web config reloaded (SIGHUP): 1 basic-auth "
                                 "user(s), TLS off; web.listen_address, log.level changed too "
                                 "and take effect at restart"))]


def test_the_watched_files_are_the_config_and_the_tls_files(tmp_path: Path) -> None:
    settings = Settings(web_tls_cert_file=CERT, web_tls_key_file=KEY)
    live = LiveWebConfig(settings, None, str(tmp_path / "c.yml"))
    assert live._watched(settings) == [str(tmp_path / "c.yml"), CERT, KEY]
    assert LiveWebConfig(Settings())._watched(Settings()) == []
    assert live.reload() is True and live.current().settings is settings  # reread: the same


@pytest.mark.parametrize(("old", "new"), [((CERT, KEY), (CERT_B, KEY_B)),
                                          ((CERT_B, KEY_B), (CERT, KEY))])
def test_after_the_files_moved_the_new_ones_are_watched(old: tuple[str, str],
                                                        new: tuple[str, str]) -> None:
    """A reload that names other TLS files stamps those, so the next look sees no change
    (whichever way the names sort)."""
    before = Settings(web_tls_cert_file=old[0], web_tls_key_file=old[1])
    after = Settings(web_tls_cert_file=new[0], web_tls_key_file=new[1])
    assert stamp(old) != stamp(new)
    reread = Reread(after)
    live = LiveWebConfig(before, reread, None, interval=0.0)
    assert live.reload() is True and reread.calls == 1
    for _ in range(3):
        live.current()
    assert reread.calls == 1
    assert live._stamp == stamp(new)


def test_a_change_while_the_files_are_read_is_read_at_the_next_look(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("a")
    edits = iter(["during the first read"])

    class Editing(Reread):
        def __call__(self) -> Settings:
            for text in edits:  # an operator saving again while the exporter reads
                path.write_text(text)
                break
            return super().__call__()

    reread = Editing(Settings())
    live = LiveWebConfig(Settings(), reread, str(path), interval=0.0)
    path.write_text("bb")
    live.current()
    assert reread.calls == 1
    live.current()
    assert reread.calls == 2  # the stamp was taken before the read, so the edit is new
    live.current()
    assert reread.calls == 2


def test_the_files_are_looked_at_once_a_second_by_default(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(webreload, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    path = tmp_path / "c.yml"
    path.write_text("a")
    reread = Reread(Settings(web_basic_auth_users={"alice": ALICE}))
    live = LiveWebConfig(Settings(), reread, str(path))
    path.write_text("bb")
    clock[0] = 1000.75
    assert live.current().auth is None and reread.calls == 0
    clock[0] = 1001.0  # the look is due at exactly the interval
    assert live.current().auth is not None and reread.calls == 1
    path.write_text("ccc")
    clock[0] = 1001.75
    live.current()
    assert reread.calls == 1  # the next look is a second after that one
    clock[0] = 1002.0
    live.current()
    assert reread.calls == 2


def test_a_web_config_cannot_be_changed_once_made() -> None:
    """Connections and requests read it without the lock: a reload replaces it whole."""
    config = build(Settings(web_basic_auth_users={"alice": ALICE}))
    for name in ("settings", "auth", "context"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, name, None)


def test_sighup_reloads_from_a_thread_of_its_own() -> None:
    reread = Reread(Settings(web_basic_auth_users={"alice": ALICE}))
    live = LiveWebConfig(Settings(), reread, None, interval=3600.0)
    previous: Callable[..., object] | int | None = signal.getsignal(signal.SIGUSR1)
    try:
        live.reload_on(signal.SIGUSR1)
        assert any(t.name == "web-config-reload" and t.daemon for t in threading.enumerate())
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while reread.calls < 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGUSR1)
        while reread.calls < 2:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert live.current().auth is not None
    finally:
        signal.signal(signal.SIGUSR1, previous)  # type: ignore[arg-type]


def test_a_file_rewritten_shorter_is_read_again(tmp_path: Path) -> None:
    """Any change of the stamp, not only a larger one (a shorter file in the same inode)."""
    path = tmp_path / "c.yml"
    path.write_text("a long line")
    reread = Reread(Settings())
    live = LiveWebConfig(Settings(), reread, str(path), interval=0.0)
    inode = os.stat(path).st_ino
    path.write_text("short")
    assert os.stat(path).st_ino == inode
    live.current()
    assert reread.calls == 1


def test_a_long_certificate_path_is_cut_in_the_reload_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    long_name = tmp_path / ("c" * 130 + ".crt")
    long_name.symlink_to(CERT_B)
    shown = str(long_name)[:117] + "..."
    live = LiveWebConfig(Settings(web_tls_cert_file=CERT, web_tls_key_file=KEY),
                         Reread(Settings(web_tls_cert_file=str(long_name), web_tls_key_file=KEY_B)))
    with caplog.at_level(logging.INFO, logger=webreload.__name__):
        assert live.reload() is True
    assert messages(caplog) == [
        (logging.INFO, f"web config reloaded (SIGHUP): 0 basic-auth user(s), TLS certificate {shown}")]


def test_requests_that_find_a_look_due_at_once_look_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests past the hot path wait for the lock; the second finds the look done."""
    clock, asked = [1000.0], [0]

    def monotonic() -> float:
        asked[0] += 1
        return clock[0]

    monkeypatch.setattr(webreload, "time", SimpleNamespace(monotonic=monotonic))
    looks = []
    real_stamp = webreload.stamp
    monkeypatch.setattr(webreload, "stamp", lambda paths: looks.append(1) or real_stamp(paths))
    path = tmp_path / "c.yml"
    path.write_text("a")
    live = LiveWebConfig(Settings(), Reread(Settings()), str(path))
    looks.clear()
    clock[0], asked[0] = 1001.5, 0
    with live._lock:
        requests = [threading.Thread(target=live.current) for _ in range(2)]
        for request in requests:
            request.start()
        deadline = time.perf_counter() + 5
        while asked[0] < 2:  # both past the hot path, neither past the lock
            assert time.perf_counter() < deadline
            time.sleep(0.001)
    for request in requests:
        request.join(5)
    assert looks == [1]


def test_a_request_between_looks_takes_no_lock(tmp_path: Path) -> None:
    """The hot path: a reload holding the lock does not hold up the requests meanwhile."""
    live = LiveWebConfig(Settings(), Reread(Settings()), str(tmp_path / "c.yml"), interval=3600.0)
    served: list[object] = []
    with live._lock:
        request = threading.Thread(target=lambda: served.append(live.current()))
        request.start()
        request.join(2)
        assert served == [live._config]
