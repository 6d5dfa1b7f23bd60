"""The web config (users, TLS certificate and key) swapped under a running exporter is served
without a restart; an invalid one keeps the last good one with one log line; SIGHUP reloads.

Real exporter processes on loopback, a real TLS client; files swapped as the kubelet swaps a
mounted Secret's (a new directory behind a symlink, renamed over the old link).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from benchmarks.stack import REPO, Service, free_port, wait_until
from exporter.config import merge
from exporter.webauth import hash_password
from exporter.webreload import LiveWebConfig

HERE = Path(__file__).parent
CERT_A, KEY_A = HERE / "test_exporter_tls.crt", HERE / "test_exporter_tls.key"
CERT_B, KEY_B = HERE / "test_exporter_tls_renewed.crt", HERE / "test_exporter_tls_renewed.key"
RELOADED, REFUSED = "web config reloaded", "web config not reloaded"


def users(**passwords: str) -> str:
    lines = [f'    {user}: "{hash_password(pw, iterations=1000)}"' for user, pw in passwords.items()]
    return "web:\n  basic_auth_users:\n" + "\n".join(lines) + "\n"


def swap(link: Path, text: str | None = None, files: dict[str, Path] | None = None) -> None:
    """Point ``link`` at a new directory holding ``config.yml`` (``text``) or copies of
    ``files``, renamed over it in one step, as the kubelet updates a mounted Secret."""
    target = link.parent / f"v{time.monotonic_ns()}"
    target.mkdir()
    if text is not None:
        (target / "config.yml").write_text(text)
    for name, source in (files or {}).items():
        shutil.copy(source, target / name)
    new = link.parent / "link.new"
    new.symlink_to(target)
    os.replace(new, link)


def exporter(tmp_path: Path, config: Path, scheme: str = "http") -> Service:
    port = free_port()
    argv = [sys.executable, "-m", "exporter", f"--web.listen-address=127.0.0.1:{port}",
            f"--config={config}", "--no-collector.gpu", "--no-collector.host"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if scheme == "https":
        return TlsExporter("exporter", argv, port, tmp_path, ready_path="/healthz", env=env)
    return Service("exporter", argv, port, tmp_path, ready_path="/healthz", env=env)


class TlsExporter(Service):
    def _ready(self, path: str):  # type: ignore[no-untyped-def]
        return lambda: served_cert(self.port) is not None


def status(port: int, login: str | None = None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(login.encode()).decode()} \
        if login else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def fingerprint(pem: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read_text())).hexdigest()


def served_cert(port: int) -> str:
    """SHA-256 of the certificate a new TLS connection is served (verification off: we read
    which certificate it is)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def trusting(pem: Path, port: int) -> int:
    """Status of /healthz over TLS for a client that trusts only ``pem``."""
    context = ssl.create_default_context(cafile=str(pem))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5,
                                context=context) as response:
        return int(response.status)


def test_swapped_users_removed_user_and_old_password_401_new_password_200(
        tmp_path: Path) -> None:
    link = tmp_path / "secret"
    swap(link, users(alice="a1", bob="b1", carol="c1"))
    with exporter(tmp_path, link / "config.yml") as svc:
        port = svc.port
        for login in ("alice:a1", "bob:b1", "carol:c1"):
            assert status(port, login) == 200  # each verified, so remembered
        swap(link, users(alice="a2", carol="c1", dave="d1"))
        # bob was remembered: until the reload his scrapes cost no hash and pass.
        wait_until(lambda: status(port, "bob:b1") == 401, timeout=10, what="bob removed")
        assert status(port, "alice:a1") == 401  # the old password, remembered before
        assert status(port, "alice:a2") == 200
        assert status(port, "dave:d1") == 200
        assert status(port, "carol:c1") == 200  # unchanged
        assert status(port) == 401
        assert svc.log().count(RELOADED) == 1, svc.log()
        assert REFUSED not in svc.log()


def test_an_invalid_file_keeps_the_last_good_config_with_one_line(tmp_path: Path) -> None:
    link = tmp_path / "secret"
    swap(link, users(alice="a1"))
    with exporter(tmp_path, link / "config.yml") as svc:
        port = svc.port
        assert status(port, "alice:a1") == 200
        swap(link, "web:\n  basic_auth_users:\n    alice: a2-in-plain-text\n")
        # The files are looked at when a request comes (at most once a second), as a scrape's.
        wait_until(lambda: status(port, "alice:a1") == 200 and REFUSED in svc.log(),
                   timeout=10, what="the refusal logged")
        line = next(x for x in svc.log().splitlines() if REFUSED in x)
        assert "web.basic_auth_users.alice" in line and "a2-in-plain-text" not in line
        # Connections over several of the exporter's looks at the files: still the old users,
        # and the same refusal is not logged again.
        until = time.monotonic() + 2.5
        while time.monotonic() < until:
            assert status(port, "alice:a1") == 200
            assert status(port) == 401
        assert svc.log().count(REFUSED) == 1, svc.log()
        assert RELOADED not in svc.log()
        swap(link, users(alice="a2"))  # fixed: taken
        wait_until(lambda: status(port, "alice:a1") == 401, timeout=10, what="the fixed file")
        assert status(port, "alice:a2") == 200
        assert svc.log().count(RELOADED) == 1 and svc.log().count(REFUSED) == 1, svc.log()
        assert svc.proc.poll() is None


def test_a_renewed_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    link = tmp_path / "tls"
    swap(link, files={"tls.crt": CERT_A, "tls.key": KEY_A})
    config = tmp_path / "config.yml"
    config.write_text(f"web:\n  tls_cert_file: {link}/tls.crt\n  tls_key_file: {link}/tls.key\n")
    old, new = fingerprint(CERT_A), fingerprint(CERT_B)
    assert old != new
    with exporter(tmp_path, config, "https") as svc:
        assert served_cert(svc.port) == old
        assert trusting(CERT_A, svc.port) == 200
        swap(link, files={"tls.crt": CERT_B, "tls.key": KEY_B})
        wait_until(lambda: served_cert(svc.port) == new, timeout=10, what="the renewed cert")
        assert trusting(CERT_B, svc.port) == 200
        with pytest.raises(urllib.error.URLError):  # the old certificate is gone for good
            trusting(CERT_A, svc.port)
        assert svc.log().count(RELOADED) == 1, svc.log()
        # A broken renewal (a certificate without its key) keeps serving the renewed one.
        swap(link, files={"tls.crt": CERT_A, "tls.key": KEY_B})
        wait_until(lambda: served_cert(svc.port) == new and REFUSED in svc.log(), timeout=10,
                   what="the refusal logged")
        for _ in range(5):
            assert served_cert(svc.port) == new
        assert svc.log().count(REFUSED) == 1 and svc.log().count(RELOADED) == 1, svc.log()


def test_sighup_reloads_and_the_exporter_keeps_running(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(users(alice="a1"))
    with exporter(tmp_path, config) as svc:
        assert status(svc.port, "alice:a1") == 200
        svc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: f"{RELOADED} (SIGHUP)" in svc.log(), timeout=10, what="reload line")
        assert svc.proc.poll() is None
        assert status(svc.port, "alice:a1") == 200
        config.write_text("web: [unclosed\n")
        svc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: f"{REFUSED} (SIGHUP)" in svc.log(), timeout=10, what="refusal line")
        assert status(svc.port, "alice:a1") == 200 and svc.proc.poll() is None
        svc.proc.terminate()
        assert svc.proc.wait(timeout=10) == 0, svc.log()
    lines = [x for x in svc.log().splitlines() if "web config" in x]
    assert len(lines) == 2 or (len(lines) == 3 and REFUSED in lines[1]), lines


def test_requests_between_changes_read_no_file(tmp_path: Path) -> None:
    """The scrape path: with nothing changed, no re-read however often it looks; a change is
    read once."""
    path = tmp_path / "config.yml"
    path.write_text(users(alice="a1"))
    reads = []

    def reread():  # type: ignore[no-untyped-def]
        reads.append(1)
        from exporter.config import load_file
        return merge(file=load_file(str(path)), flags={})

    live = LiveWebConfig(reread(), reread, str(path), interval=0.0)  # a look on every call
    reads.clear()
    first = live.current()
    for _ in range(1000):
        assert live.current() is first
    assert reads == []
    path.write_text(users(alice="a2"))
    for _ in range(100):
        assert live.current() is not first
    assert len(reads) == 1
    slow = LiveWebConfig(reread(), reread, str(path), interval=3600.0)
    reads.clear()
    path.write_text(users(alice="a3"))
    assert slow.current() is slow.current() and reads == []  # at most one look an interval


def test_a_reload_forgets_only_the_changed_users_verified_passwords() -> None:
    from exporter.webauth import BasicAuth, Verdict

    def login(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    alice, bob = hash_password("a1", iterations=100), hash_password("b1", iterations=100)
    auth = BasicAuth({"alice": alice, "bob": bob}, burst=2, per_second=0.0)
    assert auth.verify(login("alice", "a1")) is Verdict.OK
    assert auth.verify(login("bob", "b1")) is Verdict.OK  # the budget is spent now
    renewed = auth.renewed({"alice": alice, "bob": hash_password("b2", iterations=100)})
    assert renewed.verify(login("alice", "a1")) is Verdict.OK  # remembered: no hash, no budget
    assert renewed.verify(login("bob", "b1")) is not Verdict.OK  # must hash again: refused
    assert auth.renewed({"bob": bob}).verify(login("alice", "a1")) is not Verdict.OK
