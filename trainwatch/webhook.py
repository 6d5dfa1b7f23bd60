"""A local Alertmanager webhook receiver: keeps every notification it is sent, in order.

`make demo` prints what it received; the end-to-end alert test asserts on it; and

    python -m trainwatch.webhook [--port 10919]

prints every notification the `make run` stack's Alertmanager delivers (the shipped
alertmanager.yml's webhooks point at 127.0.0.1:10919) as its templates render it. Alertmanager
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

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Notification = dict[str, Any]
# Where the shipped alertmanager.yml's webhooks send.
DEFAULT_PORT = 10919


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 (``port`` 0 picks a free one) recording notifications;
    ``on_notification`` is called with each one as it arrives."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 on_notification: Callable[[Notification], None] | None = None) -> None:
        self._on_notification = on_notification
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
                    if owner._on_notification is not None:
                        owner._on_notification(doc)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Print every notification delivered to 127.0.0.1:PORT until Ctrl-C."""
    from trainwatch.demo.show import notification_text
    from trainwatch.stack.layout import StackError, project_file

    parser = argparse.ArgumentParser(prog="python -m trainwatch.webhook",
                                     description="print Alertmanager's webhook notifications")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"default {DEFAULT_PORT}, where the shipped alertmanager.yml sends")
    args = parser.parse_args(argv)
    try:
        templates = project_file("prometheus/alertmanager/templates")
    except StackError as err:
        print(f"trainwatch.webhook: error: {err}", file=sys.stderr)
        return 2

    def show(note: Notification) -> None:
        print(f"--- via receiver {note.get('receiver')}\n{notification_text(note, templates)}",
              flush=True)

    try:
        receiver = WebhookReceiver(port=args.port, on_notification=show)
    except OSError as err:
        print(f"trainwatch.webhook: error: cannot listen on 127.0.0.1:{args.port} "
              f"({err.strerror}): pass --port PORT", file=sys.stderr)
        return 2
    stop = threading.Event()
    # Handlers set here, not Python's KeyboardInterrupt: a process started in the background by
    # a non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"listening on {receiver.url}; Ctrl-C stops", flush=True)
    try:
        stop.wait()
    finally:
        receiver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
