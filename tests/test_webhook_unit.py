"""trainwatch.webhook in process: the recorded lines, the receiver's answers to each request,
the alert filter, the notification text with and without amtool, and ``main`` from its flags
to the notification it prints and records (its signal handlers stood in for)."""

from __future__ import annotations

import calendar
import io
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import free_port
from trainwatch import webhook
from trainwatch.layout import StackError
from trainwatch.webhook import (
    DEFAULT_PORT,
    RECEIVED,
    RUNBOOKS_PATH,
    WebhookReceiver,
    _printable,
    alerts_in,
    notification_text,
    record,
    recorded,
    stamp,
)

TEMPLATES = Path(__file__).resolve().parent.parent / "prometheus/alertmanager/templates"


def get(url: str) -> tuple[int, str, str]:
    """Status, Content-Type and body of a GET (an error status's too)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def post(url: str, body: bytes) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=5) as resp:
            assert resp.read() == b""
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


# Stamps and the recorded file


def test_stamp_is_rfc3339_utc_to_the_second() -> None:
    assert stamp(0) == "1970-01-01T00:00:00Z"
    assert stamp(1_700_000_123.987) == "2023-11-14T22:15:23Z"
    now = calendar.timegm(time.strptime(stamp(), "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(now - time.time()) < 5


def test_stamp_is_utc_whatever_the_local_time_zone(local_zone: Callable[[str], None]) -> None:
    local_zone("XYZ-5:30")  # 5 h 30 east of UTC: a local-time stamp would read 05:30:00Z
    assert time.localtime(0).tm_hour == 5  # the zone took
    assert stamp(0) == "1970-01-01T00:00:00Z"
    assert stamp(1_700_000_123.987) == "2023-11-14T22:15:23Z"


def test_record_appends_one_stamped_json_line_each_and_recorded_reads_them_back_in_order(
        tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text("")
    first, second = {"status": "firing", "n": 1}, {"status": "resolved", "n": 2}
    record(path, first)
    record(path, second)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and path.read_text().endswith("}\n")
    doc = json.loads(lines[0])
    assert set(doc) == {RECEIVED, "notification"} and doc["notification"] == first
    at = calendar.timegm(time.strptime(doc[RECEIVED], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(at - time.time()) < 5
    assert [n for _, n in recorded(path)] == [first, second]
    assert [r for r, _ in recorded(path)] == [doc[RECEIVED], json.loads(lines[1])[RECEIVED]]


def test_recorded_skips_what_is_not_a_whole_line_and_a_missing_file_is_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    assert list(recorded(path)) == []
    path.write_text("\n".join([
        json.dumps({RECEIVED: "2026-11-26T00:00:01Z", "notification": {"n": 1}}),
        '{"received": "2026-11-26T00:00:02Z", "notif',  # cut short
        json.dumps({"notification": {"n": 2}}),  # no time
        json.dumps({RECEIVED: "t"}),  # no notification
        json.dumps({RECEIVED: "t", "notification": 5}),  # not a notification
        json.dumps(["a", "b"]),
        json.dumps({RECEIVED: 17, "notification": {"n": 3}}),
    ]) + "\n")
    assert list(recorded(path)) == [("2026-11-26T00:00:01Z", {"n": 1}), ("17", {"n": 3})]


# The receiver


def test_the_receiver_keeps_each_json_notification_in_order_and_calls_back_with_it() -> None:
    seen: list[Any] = []
    with WebhookReceiver(on_notification=seen.append) as hook:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/alerts", hook.url)
        assert post(hook.url, b'{"status": "firing", "n": 1}') == 200
        assert post(hook.url + "/warning", b'{"n": 2}') == 200
        assert post(hook.url, b"not json") == 400
        assert post(hook.url, b"") == 400
        got = hook.notifications()
        assert got == [{"status": "firing", "n": 1}, {"n": 2}] == seen
        got.clear()
        assert len(hook.notifications()) == 2  # a copy
        assert hook._thread.daemon  # a receiver left open never keeps the process alive


def test_port_0_picks_a_free_port_for_each_receiver() -> None:
    with WebhookReceiver() as one, WebhookReceiver() as two:
        ports = {int(h.url.split(":")[2].split("/")[0]) for h in (one, two)}
        assert len(ports) == 2 and all(port > 1023 for port in ports)


def test_a_post_without_a_length_is_an_empty_body_answered_at_once() -> None:
    with WebhookReceiver() as hook, socket.create_connection(
            ("127.0.0.1", int(hook.url.split(":")[2].split("/")[0])), timeout=3) as sock:
        sock.sendall(b"POST /alerts HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 400 ")
        assert hook.notifications() == []


def test_the_receiver_answers_ready_and_404_elsewhere_without_runbooks() -> None:
    with WebhookReceiver() as hook:
        base = hook.url.removesuffix("/alerts")
        assert get(base + "/-/ready") == (200, "text/plain; charset=utf-8", "ready\n")
        assert get(base + "/-/ready?probe=1")[2] == "ready\n"
        for path in (RUNBOOKS_PATH, "/alerts", "/-/ready/x"):
            status, _, body = get(base + path)
            assert status == 404 and "POST notifications to any path; GET /-/ready" in body
            assert RUNBOOKS_PATH not in body
        assert hook.notifications() == []


def test_the_receiver_serves_the_runbook_as_html_and_names_it_in_its_404(tmp_path: Path) -> None:
    runbook = tmp_path / "runbooks.md"
    runbook.write_bytes(b"# Runbooks\n\n## TrainwatchGPUThrottled\n\nSee `nvidia-smi` \xff.\n")
    with WebhookReceiver(runbooks=runbook) as hook:
        base = hook.url.removesuffix("/alerts")
        assert hook.runbooks == runbook
        status, kind, page = get(base + RUNBOOKS_PATH + "?x=1")
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert '<h2 id="trainwatchgputhrottled">TrainwatchGPUThrottled</h2>' in page
        assert "<code>nvidia-smi</code> \ufffd." in page
        for elsewhere in ("/elsewhere", "/zzz", RUNBOOKS_PATH + "/x"):
            status, _, body = get(base + elsewhere)
            assert status == 404 and f"GET /-/ready or {RUNBOOKS_PATH}" in body


def test_a_closed_receiver_no_longer_listens() -> None:
    hook = WebhookReceiver()
    port = int(hook.url.split(":")[2].split("/")[0])
    hook.close()
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))


# Finding alerts


# As they arrive: parsed from JSON, so no string is the same object as a test's literal
# (names of two characters or more: CPython keeps one object per one-character string).
NOTES = json.loads(json.dumps([
    {"status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "AlertA", "trial": "t1", "rank": "0"}},
        {"status": "resolved", "labels": {"alertname": "AlertB", "trial": "t1"}}]},
    {"status": "resolved"},
    {"alerts": [{"status": "firing"},
                {"status": "resolved", "labels": {"alertname": "AlertA", "trial": "t2"}}]},
]))


def pairs(found: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[tuple[int, str]]:
    return [(NOTES.index(n), a.get("labels", {}).get("alertname", "-")) for n, a in found]


def test_alerts_in_filters_by_name_status_and_labels_together() -> None:
    assert pairs(alerts_in(NOTES)) == [(0, "AlertA"), (0, "AlertB"), (2, "-"), (2, "AlertA")]
    assert pairs(alerts_in(NOTES, "AlertA")) == [(0, "AlertA"), (2, "AlertA")]
    assert pairs(alerts_in(NOTES, status="resolved")) == [(0, "AlertB"), (2, "AlertA")]
    assert pairs(alerts_in(NOTES, "AlertA", "resolved")) == [(2, "AlertA")]
    assert pairs(alerts_in(NOTES, trial="t1")) == [(0, "AlertA"), (0, "AlertB")]
    assert pairs(alerts_in(NOTES, "AlertB", trial="t1", status="firing")) == []
    assert pairs(alerts_in(NOTES, "AlertA", trial="t1", rank="0")) == [(0, "AlertA")]
    assert pairs(alerts_in(NOTES, "AlertC")) == [] and alerts_in([]) == []
    assert pairs(alerts_in(NOTES, trial="t1", rank="0")) == [(0, "AlertA")]  # every label
    assert pairs(alerts_in(NOTES, trial="t1", rank="3")) == []  # one label of two is not enough


# The notification text


FIRING = {"receiver": "r", "status": "firing", "groupLabels": {"alertname": "A"},
          "commonLabels": {}, "commonAnnotations": {},
          "alerts": [{"status": "firing",
                      "labels": {"alertname": "A", "experiment": "e", "trial": "t", "rank": "0",
                                 "severity": "warning"},
                      "annotations": {"summary": "S", "remedy": "R", "other": "O"},
                      "startsAt": "2026-11-26T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z"}]}


def test_the_text_is_what_amtool_renders_from_the_shipped_templates() -> None:
    assert notification_text(FIRING, TEMPLATES) == (
        "[FIRING:1] A\nFiring:\n* trial e/t rank 0 (warning, firing since 00:00:00 UTC)\n"
        "  S\n  Remedy: R\n  Runbook:")


def test_without_amtool_or_where_it_fails_the_text_is_the_plain_annotations(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = "[FIRING] {'alertname': 'A'}\n* A firing\n  summary: S\n  remedy: R"
    assert notification_text(FIRING, tmp_path / "none") == plain  # amtool fails: no templates
    monkeypatch.setattr(webhook.shutil, "which", lambda name: None)
    assert notification_text(FIRING, TEMPLATES) == plain
    note = {"alerts": [
        {"status": "resolved", "labels": {"alertname": "B\x1b[2J"},
         "annotations": {"runbook_url": "http://r", "measured": "5%", "summary": "x\ny"}},
        {"labels": {}}]}
    assert notification_text(note, TEMPLATES) == (
        "[?] {}\n* B\\x1b[2J resolved\n  summary: x\\ny\n  measured: 5%\n"
        "  runbook_url: http://r\n* None None")
    assert notification_text({"status": "resolved", "groupLabels": {"t": "a\nb"}},
                             TEMPLATES) == "[RESOLVED] {'t': 'a\\\\nb'}"


def test_amtool_killed_by_a_signal_is_a_failure_too(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "amtool"
    fake.write_text("#!/bin/sh\necho partial\nkill -9 $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(webhook.shutil, "which", lambda name: str(fake))
    assert notification_text(FIRING, TEMPLATES) == (
        "[FIRING] {'alertname': 'A'}\n* A firing\n  summary: S\n  remedy: R")
    fake.write_text("#!/bin/sh\necho '  rendered  '\necho\n")
    assert notification_text(FIRING, TEMPLATES) == "  rendered"


def test_printable_writes_out_every_string_keys_and_list_items_too() -> None:
    value = {"a\nb": ["c\x1b", {"d": "e\x07"}, 5, None], 7: 1.5, "ok": True}
    assert _printable(value) == {"a\\nb": ["c\\x1b", {"d": "e\\x07"}, 5, None], "7": 1.5,
                                 "ok": True}
    assert _printable("plain") == "plain" and _printable(3) == 3


# main


def fake_signals(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]
                 ) -> dict[int, Callable[..., None]]:
    """Stand in for signal.signal: the handlers are kept, and once SIGTERM's is set, ``then``
    runs in a thread and SIGTERM's handler is called after it (the receiver listens by then)."""
    handlers: dict[int, Callable[..., None]] = {}

    def install(signum: int, handler: Callable[..., None]) -> None:
        handlers[signum] = handler
        if signum == signal.SIGTERM:
            def go() -> None:
                then()
                handler(signum, None)
            threading.Thread(target=go, daemon=True).start()

    monkeypatch.setattr(webhook.signal, "signal", install)
    return handlers


def test_main_prints_and_records_each_notification_until_sigterm(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    port = free_port()
    monkeypatch.setattr(webhook.shutil, "which", lambda name: None)
    note = {"receiver": "team\x1b[2J", "status": "firing", "alerts": []}
    sent: list[int] = []
    handlers = fake_signals(monkeypatch, lambda: sent.append(
        post(f"http://127.0.0.1:{port}/alerts", json.dumps(note).encode())))
    assert webhook.main(["--port", str(port), "--record", str(tmp_path / "r.jsonl")]) == 0
    assert sent == [200] and set(handlers) == {signal.SIGINT, signal.SIGTERM}
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"listening on http://127.0.0.1:{port}/alerts; Ctrl-C stops"
    assert re.fullmatch(r"--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ via receiver team\\x1b\[2J",
                        out[1]), out
    assert out[2:] == ["[FIRING] {}"]
    [(_, kept)] = recorded(tmp_path / "r.jsonl")
    assert kept == note
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))  # closed on the way out


def test_each_line_main_prints_is_out_at_once_not_when_a_buffer_fills(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its output is a log file or a pipe (the stack's webhook process): block-buffered there."""
    port = free_port()
    monkeypatch.setattr(webhook.shutil, "which", lambda name: None)
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(raw, 1 << 16)))
    seen: list[bytes] = []

    def then() -> None:
        until = time.monotonic() + 3
        while b"listening" not in raw.getvalue() and time.monotonic() < until:
            time.sleep(0.01)
        seen.append(raw.getvalue())
        post(f"http://127.0.0.1:{port}/alerts", b'{"receiver": "r", "status": "firing"}')
        seen.append(raw.getvalue())

    fake_signals(monkeypatch, then)
    assert webhook.main(["--port", str(port)]) == 0
    assert seen[0] == f"listening on http://127.0.0.1:{port}/alerts; Ctrl-C stops\n".encode()
    assert seen[1].startswith(seen[0] + b"--- ") and seen[1].endswith(b"[FIRING] {}\n")


def test_main_listens_where_listen_address_says_and_sigint_stops_it_too(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    handlers: dict[int, Callable[..., None]] = {}

    def install(signum: int, handler: Callable[..., None]) -> None:
        handlers[signum] = handler
        if signum == signal.SIGTERM:  # both are set: SIGINT's alone ends the wait
            threading.Thread(target=lambda: handlers[signal.SIGINT](signal.SIGINT, None),
                             daemon=True).start()

    monkeypatch.setattr(webhook.signal, "signal", install)
    assert webhook.main([f"--web.listen-address=:{port}"]) == 0
    assert capsys.readouterr().out == (f"listening on http://127.0.0.1:{port}/alerts; "
                                       "Ctrl-C stops\n")
    fake_signals(monkeypatch, lambda: None)
    assert webhook.main(["--web.listen-address", f"127.0.0.1:{port}"]) == 0
    assert f"127.0.0.1:{port}/alerts" in capsys.readouterr().out


@pytest.mark.parametrize("address", ["127.0.0.1", "host:", "host:90a", ":-1"])
def test_a_listen_address_without_a_port_is_a_usage_error(
        address: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        webhook.main(["--web.listen-address", address])
    assert exit_.value.code == 2
    assert f"--web.listen-address: {address!r} is not HOST:PORT" in capsys.readouterr().err


def test_python_m_runs_main() -> None:
    done = subprocess.run([sys.executable, "-m", "trainwatch.webhook",
                           "--web.listen-address=nowhere"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=TEMPLATES.parent.parent.parent)
    assert done.returncode == 2 and "'nowhere' is not HOST:PORT" in done.stderr


def test_port_and_listen_address_together_are_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        webhook.main(["--port", "1", "--web.listen-address", "h:2"])


def test_the_default_port_is_where_the_shipped_alertmanager_sends(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[tuple[str, int]] = []

    def refuse(host: str, port: int, **kw: object) -> None:
        asked.append((host, port))
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(webhook, "WebhookReceiver", refuse)
    assert webhook.main([]) == 2
    assert asked == [("127.0.0.1", DEFAULT_PORT)] and DEFAULT_PORT == 10919
    assert capsys.readouterr().err == (
        "trainwatch.webhook: error: cannot listen on 127.0.0.1:10919 (Address already in "
        "use): pass --port PORT\n")


def test_main_without_the_projects_templates_is_one_error_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def missing(name: str) -> Path:
        raise StackError(f"no {name}")

    monkeypatch.setattr(webhook, "project_file", missing)
    assert webhook.main(["--port", "0"]) == 2
    assert capsys.readouterr().err == (
        "trainwatch.webhook: error: no prometheus/alertmanager/templates\n")
