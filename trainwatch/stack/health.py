"""Is each service answering, is Prometheus scraping its targets, does it reach Alertmanager."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainwatch.layout import StackError


def http_status(url: str, timeout: float = 1.0, method: str = "GET") -> int | None:
    """The HTTP status of ``url``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method),
                                    timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return None


def api(base: str, path: str, timeout: float = 2.0) -> Any:
    """``data`` of a Prometheus ``/api/v1/<path>``; None when it cannot be read."""
    try:
        with urllib.request.urlopen(f"{base}/api/v1/{path}", timeout=timeout) as resp:
            return json.loads(resp.read()).get("data")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def no_nvml(exporter: str) -> bool:
    """Whether the exporter says this machine has no NVML (``trainwatch_gpu_nvml_absent 1``)."""
    try:
        with urllib.request.urlopen(f"{exporter}/metrics", timeout=5.0) as resp:
            text = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return False
    return "\ntrainwatch_gpu_nvml_absent 1" in "\n" + text


def port_taken(port: int) -> bool:
    """Whether something already listens on 127.0.0.1:port (SO_REUSEADDR as servers set it, so
    a closed connection in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_ready(name: str, ready: Callable[[], bool], where: str,
               proc: subprocess.Popen[bytes], log_tail: Callable[[], str],
               timeout: float = 60.0) -> None:
    """Poll ``ready`` (e.g. a URL answering 200) until true; StackError at once if the process
    exits. ``where`` names what was polled, for the message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with {proc.returncode} before it was ready: "
                             f"{log_tail()}")
        if ready():
            return
        time.sleep(0.1)
    raise StackError(f"{name} did not answer {where} within {timeout:.0f}s: {log_tail()}")


@dataclass(frozen=True)
class Target:
    """One scrape target as Prometheus sees it."""

    job: str
    url: str
    health: str  # up, down, unknown (not scraped yet)
    error: str


def targets(prometheus: str) -> list[Target] | None:
    data = api(prometheus, "targets?state=active")
    if data is None:
        return None
    return [Target(t["labels"].get("job", "?"), t.get("scrapeUrl", "?"), t.get("health", "?"),
                   t.get("lastError", "")) for t in data.get("activeTargets", [])]


def alertmanagers(prometheus: str) -> list[str] | None:
    """The Alertmanager URLs Prometheus sends alerts to."""
    data = api(prometheus, "alertmanagers")
    if data is None:
        return None
    return [a["url"] for a in data.get("activeAlertmanagers", [])]


# While `up` waits, a line at least this often (seconds): `make run` shows progress.
PROGRESS_EVERY = 5.0


def wait_scraped(prometheus: str, alertmanager: str, timeout: float,
                 say: Callable[[str], None] = lambda _: None) -> None:
    """Wait (bounded: after it, `status` says what is wrong) until every target's last scrape
    succeeded and Prometheus has found the Alertmanager. "Scraped once" is not enough: a
    restarted exporter stays "down" in Prometheus's view until its next scrape. ``say`` gets
    a line every PROGRESS_EVERY seconds naming what it still waits for."""
    start = time.monotonic()
    deadline, next_word = start + timeout, start + PROGRESS_EVERY
    while time.monotonic() < deadline:
        found = targets(prometheus) or []
        managers = alertmanagers(prometheus) or []
        if found and all(t.health == "up" for t in found) \
                and any(m.startswith(alertmanager) for m in managers):
            return
        if time.monotonic() >= next_word:
            waiting = [t.job for t in found if t.health != "up"] or ["its targets"]
            say(f"waiting {time.monotonic() - start:.0f} s for Prometheus's first scrape of "
                f"{', '.join(waiting)} (at most {timeout:.0f} s)")
            next_word += PROGRESS_EVERY
        time.sleep(0.2)


def reload(name: str, url: str) -> None:
    """Ask a running Prometheus or Alertmanager to re-read its configuration; StackError with
    its reason (e.g. a rule file that does not parse) when it refuses."""
    request = urllib.request.Request(f"{url}/-/reload", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30.0):
            return
    except urllib.error.HTTPError as err:
        reason = err.read().decode(errors="replace").strip().splitlines()[:1] or [str(err.code)]
    except (urllib.error.URLError, OSError) as err:
        reason = [str(getattr(err, "reason", err))]
    raise StackError(f"{name} at {url} refused to reload its configuration ({reason[0][:300]}); "
                     "it keeps the old one")
