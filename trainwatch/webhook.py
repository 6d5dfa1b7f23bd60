"""A local Alertmanager webhook receiver: keeps every notification it is sent, in order.

`make demo` prints what it received; the end-to-end alert test asserts on it. Alertmanager
POSTs one JSON document per notification (its "webhook" format, version 4): the receiver's
name, the group's status and labels, and every alert with its labels and annotations.

Example:
    >>> import json, urllib.request
    >>> with WebhookReceiver() as hook:
    ...     body = json.dumps({"status": "firing", "alerts": []}).encode()
    ...     _ = urllib.request.urlopen(urllib.request.Request(hook.url, data=body)).read()
    ...     [n["status"] for n in hook.notifications()]
    ['firing']
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Notification = dict[str, Any]


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 (``port`` 0 picks a free one) recording notifications."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._received: list[Notification] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self.url = f"http://{host}:{self._server.server_port}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="webhook-receiver", daemon=True)
        self._thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    doc = json.loads(body)
                except ValueError:
                    self.send_error(400, "not JSON")
                    return
                with owner._lock:
                    owner._received.append(doc)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass  # Alertmanager's retries would flood the demo's output

        return Handler

    def notifications(self) -> list[Notification]:
        """A copy of everything received so far, oldest first."""
        with self._lock:
            return list(self._received)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:  # noqa: PYI034 - typing.Self is 3.11+
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def alerts_in(notifications: list[Notification], alertname: str | None = None,
              status: str | None = None, **labels: str) -> list[tuple[Notification, dict[str, Any]]]:
    """(notification, alert) pairs whose alert has ``alertname``, ``status`` and ``labels``."""
    found = []
    for note in notifications:
        for alert in note.get("alerts", []):
            have = alert.get("labels", {})
            if alertname is not None and have.get("alertname") != alertname:
                continue
            if status is not None and alert.get("status") != status:
                continue
            if all(have.get(k) == v for k, v in labels.items()):
                found.append((note, alert))
    return found
