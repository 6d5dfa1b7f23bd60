"""trainwatch.stack.health against a scripted loopback server (tests/loopback.py) and a fake
clock: what each probe sends, what it makes of every answer (a status, an error status, no
answer, no JSON), and how the waits decide, report progress and give up. No stack started."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.loopback import Script, scripted_server
from tests.trial_support import closed_port_url
from trainwatch.layout import StackError
from trainwatch.stack import health


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    with scripted_server() as found:
        yield found


@pytest.fixture
def timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The timeout of every urlopen the module makes (the real urlopen still answers)."""
    seen: list[float] = []
    real = urllib.request.urlopen

    def urlopen(request: Any, timeout: float) -> Any:
        seen.append(timeout)
        return real(request, timeout=timeout)

    monkeypatch.setattr(health.urllib.request, "urlopen", urlopen)
    return seen


class Clock:
    """health's ``time``: monotonic seconds that move only when the module sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now = round(self.now + seconds, 6)  # lands on a deadline exactly


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(health, "time", SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


def test_http_status_is_the_answers_status_an_error_status_or_none(
        server: tuple[str, Script], timeouts: list[float]) -> None:
    base, script = server
    script.answer("fine", status=203)
    assert health.http_status(f"{base}/x") == 203
    assert script.requests[-1].method == "GET" and script.requests[-1].path == "/x"
    script.answer("gone", status=404)
    assert health.http_status(f"{base}/y", timeout=3.5, method="POST") == 404
    assert script.requests[-1].method == "POST"
    assert health.http_status(closed_port_url()) is None
    assert timeouts == [1.0, 3.5, 1.0]


def test_api_is_the_data_of_the_v1_path_and_none_when_unreadable(
        server: tuple[str, Script], timeouts: list[float]) -> None:
    base, script = server
    script.answer(json.dumps({"status": "success", "data": {"a": [1, 2]}}))
    assert health.api(base, "status/flags") == {"a": [1, 2]}
    assert script.requests[-1].path == "/api/v1/status/flags"
    script.answer(json.dumps({"status": "success"}))
    assert health.api(base, "x") is None
    script.answer("<html>not json</html>")
    assert health.api(base, "x") is None
    script.answer(json.dumps({"data": 7}), status=500)
    assert health.api(base, "x") is None
    assert health.api(closed_port_url(), "x") is None
    assert timeouts == [2.0] * 5


def test_no_nvml_is_the_absent_gauge_at_1_on_a_line_of_its_own(
        server: tuple[str, Script], timeouts: list[float]) -> None:
    base, script = server
    script.answer("trainwatch_gpu_nvml_absent 1\nother 2\n")
    assert health.no_nvml(base)
    assert script.requests[-1].path == "/metrics"
    script.answer("# HELP x\ntrainwatch_gpu_nvml_absent 1\n")
    assert health.no_nvml(base)
    for text in ("trainwatch_gpu_nvml_absent 0\n", "other 1\n",
                 "xtrainwatch_gpu_nvml_absent 1\n", "# trainwatch_gpu_nvml_absent 1\n"):
        script.answer(text)
        assert not health.no_nvml(base), text
    script.answer("trainwatch_gpu_nvml_absent 1\n", status=500)
    assert not health.no_nvml(base)
    assert not health.no_nvml(closed_port_url())
    assert set(timeouts) == {5.0}


def test_no_nvml_reads_undecodable_bytes_without_failing(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer(b"\xff\xfe\ntrainwatch_gpu_nvml_absent 1\n")
    assert health.no_nvml(base)


def test_a_port_is_taken_while_something_listens_and_free_in_time_wait() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert health.port_taken(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server's side closes first: its port is left in TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    assert not health.port_taken(port)


class Proc:
    """A Popen that exits (with ``code``) at its ``exits_at``-th poll, or never."""

    def __init__(self, exits_at: int | None = None, code: int = 3) -> None:
        self.polls, self.exits_at, self.code = 0, exits_at, code
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.polls += 1
        if self.exits_at is not None and self.polls >= self.exits_at:
            self.returncode = self.code
        return self.returncode


def test_wait_ready_returns_once_ready_polling_every_tenth_of_a_second(clock: Clock) -> None:
    answers = iter([False, False, True])
    proc = Proc()
    health.wait_ready("prometheus", lambda: next(answers), "/-/ready", proc,  # type: ignore[arg-type]
                      lambda: "tail", timeout=1.0)
    assert clock.sleeps == [0.1, 0.1] and proc.polls == 3


def test_wait_ready_fails_at_once_when_the_process_exits(clock: Clock) -> None:
    proc = Proc(exits_at=2, code=7)
    with pytest.raises(StackError) as err:
        health.wait_ready("alertmanager", lambda: False, "/-/ready", proc,  # type: ignore[arg-type]
                          lambda: "bad flag --x", timeout=60.0)
    assert str(err.value) == "alertmanager exited with 7 before it was ready: bad flag --x"
    assert clock.sleeps == [0.1]


def test_wait_ready_a_process_that_exited_fails_even_when_ready(clock: Clock) -> None:
    with pytest.raises(StackError, match="exited with 3"):
        health.wait_ready("x", lambda: True, "w", Proc(exits_at=1),  # type: ignore[arg-type]
                          lambda: "", timeout=5.0)


def test_wait_ready_gives_up_at_its_timeout_naming_what_it_polled(clock: Clock) -> None:
    calls: list[float] = []

    def ready() -> bool:
        calls.append(clock.now)
        return False

    with pytest.raises(StackError) as err:
        health.wait_ready("pushgateway", ready, "http://h:1/-/ready", Proc(),  # type: ignore[arg-type]
                          lambda: "last line", timeout=2.4)
    assert str(err.value) == "pushgateway did not answer http://h:1/-/ready within 2s: last line"
    assert calls == [round(1000.0 + i / 10, 6) for i in range(24)]  # not at the deadline


def test_wait_ready_default_timeout_is_a_minute(clock: Clock) -> None:
    with pytest.raises(StackError, match="within 60s"):
        health.wait_ready("x", lambda: False, "w", Proc(), lambda: "")  # type: ignore[arg-type]
    assert clock.now == 1060.0 and len(clock.sleeps) == 600


def _prometheus(targets: list[dict[str, Any]], managers: list[str]) -> str:
    """One body for both APIs: ``targets`` and ``alertmanagers`` each read their own key."""
    return json.dumps({"status": "success", "data": {
        "activeTargets": targets, "activeAlertmanagers": [{"url": m} for m in managers]}})


def _target(job: str, health_: str) -> dict[str, Any]:
    return {"labels": {"job": job}, "scrapeUrl": f"http://h/{job}", "health": health_,
            "lastError": f"{job} err"}


def test_targets_reads_each_active_target_with_defaults(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer(json.dumps({"data": {"activeTargets": [
        _target("gpu", "down"), {"labels": {}}]}}))
    assert health.targets(base) == [
        health.Target("gpu", "http://h/gpu", "down", "gpu err"), health.Target("?", "?", "?", "")]
    assert script.requests[-1].path == "/api/v1/targets"
    assert script.requests[-1].query == {"state": ["active"]}
    script.answer(json.dumps({"data": {}}))
    assert health.targets(base) == []
    assert health.targets(closed_port_url()) is None


def test_alertmanagers_are_the_active_urls(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer(_prometheus([], ["http://a:1/api/v2/alerts", "http://b:2/api/v2/alerts"]))
    assert health.alertmanagers(base) == ["http://a:1/api/v2/alerts", "http://b:2/api/v2/alerts"]
    assert script.requests[-1].path == "/api/v1/alertmanagers"
    script.answer(json.dumps({"data": {}}))
    assert health.alertmanagers(base) == []
    assert health.alertmanagers(closed_port_url()) is None


def test_wait_scraped_returns_once_every_target_is_up_and_the_alertmanager_found(
        server: tuple[str, Script], clock: Clock) -> None:
    base, script = server
    script.answer(_prometheus([_target("gpu", "up"), _target("host", "up")],
                              ["http://other:1/x", "http://am:9093/api/v2/alerts"]))
    said: list[str] = []
    health.wait_scraped(base, "http://am:9093", timeout=30.0, say=said.append)
    assert clock.now == 1000.0 and said == [] and clock.sleeps == []


@pytest.mark.parametrize("targets, managers", [
    ([_target("gpu", "up"), _target("host", "down")], ["http://am:9093/api/v2/alerts"]),
    ([_target("gpu", "unknown")], ["http://am:9093/api/v2/alerts"]),
    ([], ["http://am:9093/api/v2/alerts"]),
    ([_target("gpu", "up")], ["http://other:9093/api/v2/alerts"]),
    ([_target("gpu", "up")], []),
])
def test_wait_scraped_waits_out_its_timeout_while_anything_is_missing(
        server: tuple[str, Script], clock: Clock, targets: list[dict[str, Any]],
        managers: list[str]) -> None:
    base, script = server
    script.answer(_prometheus(targets, managers))
    health.wait_scraped(base, "http://am:9093", timeout=1.0)
    assert clock.sleeps == [0.2] * 5 and clock.now == 1001.0  # none at the deadline itself


def test_wait_scraped_says_what_it_waits_for_every_five_seconds(
        server: tuple[str, Script], clock: Clock) -> None:
    base, script = server
    script.answer(_prometheus([_target("gpu", "down"), _target("host", "up"),
                               _target("trainwatch", "unknown")], ["http://am:9093/x"]))
    said: list[str] = []
    health.wait_scraped(base, "http://am:9093", timeout=12.0, say=said.append)
    assert said == [
        "waiting 5 s for Prometheus's first scrape of gpu, trainwatch (at most 12 s)",
        "waiting 10 s for Prometheus's first scrape of gpu, trainwatch (at most 12 s)"]


def test_wait_scraped_says_its_targets_when_none_is_known(clock: Clock) -> None:
    said: list[str] = []
    health.wait_scraped(closed_port_url(), "http://am:9093", timeout=5.5, say=said.append)
    assert said == ["waiting 5 s for Prometheus's first scrape of its targets (at most 6 s)"]


def test_wait_scraped_is_quiet_by_default(server: tuple[str, Script], clock: Clock) -> None:
    base, script = server
    script.answer(_prometheus([], []))
    health.wait_scraped(base, "http://am:9093", timeout=6.0)
    assert clock.now - 1000.0 >= 6.0


def test_reload_posts_and_returns_when_accepted(server: tuple[str, Script],
                                               timeouts: list[float]) -> None:
    base, script = server
    script.answer("")
    health.reload("prometheus", base)
    assert [(r.method, r.path) for r in script.requests] == [("POST", "/-/reload")]
    assert timeouts == [30.0]


def test_reload_refused_names_the_first_line_of_the_reason(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer("  error loading rules: bad.yml\nsecond line\n", status=500)
    with pytest.raises(StackError) as err:
        health.reload("prometheus", base)
    assert str(err.value) == (f"prometheus at {base} refused to reload its configuration "
                              "(error loading rules: bad.yml); it keeps the old one")


def test_reload_refused_without_a_body_names_the_status(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer("", status=403)
    with pytest.raises(StackError, match=r"refused to reload its configuration \(403\)"):
        health.reload("alertmanager", base)


def test_reload_cuts_a_long_reason_at_300_characters(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer("x" * 299 + "yz", status=500)
    with pytest.raises(StackError) as err:
        health.reload("prometheus", base)
    assert f"({'x' * 299}y)" in str(err.value) and "yz" not in str(err.value)


def test_reload_with_nothing_answering_names_the_reason() -> None:
    url = closed_port_url()
    with pytest.raises(StackError) as err:
        health.reload("alertmanager", url)
    assert str(err.value).startswith(f"alertmanager at {url} refused to reload its configuration (")
    assert "refused" in str(err.value).split("(", 1)[1].lower()  # ECONNREFUSED's reason
    # The socket error's own reason, not urllib's wrapper around it ("<urlopen error ...>").
    assert re.search(r"configuration \(\[Errno \d+\] Connection refused\); it keeps the old one$",
                     str(err.value)), str(err.value)


def test_wait_scraped_counts_its_seconds_from_its_start(
        server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Clock(now=3.0)  # a monotonic clock soon after boot
    monkeypatch.setattr(health, "time", SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    base, script = server
    script.answer(_prometheus([_target("gpu", "down")], []))
    said: list[str] = []
    health.wait_scraped(base, "http://am:9093", timeout=5.1, say=said.append)
    assert said == ["waiting 5 s for Prometheus's first scrape of gpu (at most 5 s)"]  # at 5.0


@pytest.mark.parametrize("word", ["down", "unknown", "warming", "upgrading", ""])
def test_only_a_target_whose_health_is_up_counts_as_scraped(
        server: tuple[str, Script], clock: Clock, word: str) -> None:
    base, script = server
    script.answer(_prometheus([_target("gpu", "up"), _target("host", word)],
                              ["http://am:9093/api/v2/alerts"]))
    said: list[str] = []
    health.wait_scraped(base, "http://am:9093", timeout=5.1, say=said.append)
    assert clock.now == 1005.2
    assert said == ["waiting 5 s for Prometheus's first scrape of host (at most 5 s)"]


def test_a_target_is_a_value() -> None:
    target = health.Target("gpu", "http://h/gpu", "up", "")
    assert {target, health.Target("gpu", "http://h/gpu", "up", "")} == {target}
    with pytest.raises(AttributeError):
        target.health = "down"  # type: ignore[misc]


def test_reload_refused_with_a_reason_not_in_utf8_still_says_it(server: tuple[str, Script]) -> None:
    base, script = server
    script.answer(b"bad rule \xff\xfe in r.yml", status=400)
    with pytest.raises(StackError) as err:
        health.reload("prometheus", base)
    assert "(bad rule \ufffd\ufffd in r.yml)" in str(err.value)
