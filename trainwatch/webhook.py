"""A local Alertmanager webhook receiver: keeps every notification it is sent, in order.

`trainwatch stack up` runs one as its ``webhook`` process (:10919, `--webhook-port` moves it)
and points its Alertmanager's webhooks at it; the end-to-end alert test runs one in-process;

    python -m trainwatch.webhook [--port 10919] [--record FILE]

prints every notification it is sent, stamped with the time it arrived, as the shipped
templates render it, and with ``--record`` appends each to FILE as one JSON line (`trainwatch
stack notifications` reads the stack's). Alertmanager POSTs one JSON document per notification
(its "webhook" format, version 4): the receiver's name, the group's status and labels, and
every alert with its labels and annotations. ``GET /-/ready`` answers 200 once it listens;
with ``--runbooks FILE`` it serves that Markdown runbook as HTML at ``/runbooks``.

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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainwatch.cliutil import printable
from trainwatch.layout import StackError, project_file
from trainwatch.runbooks import render

Notification = dict[str, Any]

# Where the shipped alertmanager.yml's webhooks send, and the stack's receiver listens.
DEFAULT_PORT = 10919
# Where ``runbooks`` is served as HTML (the stack's rules link here).
RUNBOOKS_PATH = "/runbooks"
# The key of a recorded line that holds when the notification arrived (RFC 3339, UTC).
RECEIVED = "received"


def stamp(at: float | None = None) -> str:
    """RFC 3339 UTC time to the second, as Prometheus's own logs write it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def record(path: Path, note: Notification) -> None:
    """Append ``note`` to ``path`` as one JSON line stamped with the time it arrived."""
    with open(path, "a") as out:
        out.write(json.dumps({RECEIVED: stamp(), "notification": note}) + "\n")


def recorded(path: Path) -> Iterator[tuple[str, Notification]]:
    """(time received, notification) of each line :func:`record` wrote, oldest first; a line
    cut short (a receiver killed mid-write) is skipped."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        try:
            doc = json.loads(line)
            yield str(doc[RECEIVED]), dict(doc["notification"])
        except (ValueError, KeyError, TypeError):
            continue


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 (``port`` 0 picks a free one) recording notifications;
    ``on_notification`` is called with each one as it arrives."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 on_notification: Callable[[Notification], None] | None = None,
                 runbooks: Path | None = None) -> None:
        self._on_notification = on_notification
        self.runbooks = runbooks  # docs/runbooks.md, served as HTML at RUNBOOKS_PATH
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
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/-/ready":
                    self._send(b"ready\n", "text/plain; charset=utf-8")
                elif path == RUNBOOKS_PATH and owner.runbooks is not None:
                    page = render(owner.runbooks.read_text(errors="replace"))
                    self._send(page.encode(), "text/html; charset=utf-8")
                else:
                    self.send_error(404, "POST notifications to any path; GET /-/ready"
                                    + (f" or {RUNBOOKS_PATH}" if owner.runbooks else ""))

            def _send(self, body: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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


# The title and text that the commented Slack/email receivers of alertmanager.yml send.
TEMPLATE_TEXT = ('--template.text={{ template "trainwatch.title" . }}\n'
                 '{{ template "trainwatch.text" . }}')


def notification_text(note: Notification, templates: Path) -> str:
    """The notification as a Slack message or an email would read (the shipped templates,
    rendered by amtool from the webhook body, which is the same template data); the
    alerts' plain annotations where amtool is missing. Every string of the notification (the
    labels, a trial's name among them, and the annotations that quote them) is
    :func:`~trainwatch.cliutil.printable` first: a name's newline or escape sequence is written
    out, never a line of its own or a command to the terminal."""
    note = _printable(note)
    amtool = shutil.which("amtool")
    if amtool is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as data:
            json.dump(note, data)
            data.flush()
            done = subprocess.run(
                [amtool, "template", "render", f"--template.glob={templates}/*.tmpl",
                 TEMPLATE_TEXT, f"--template.data={data.name}"],
                capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            return done.stdout.rstrip()
    lines = [f"[{note.get('status', '?').upper()}] {note.get('groupLabels', {})}"]
    for alert in note.get("alerts", []):
        notes = alert.get("annotations", {})
        lines += [f"* {alert['labels'].get('alertname')} {alert.get('status')}",
                  *(f"  {key}: {notes[key]}" for key in ("summary", "measured", "remedy",
                                                          "runbook_url") if key in notes)]
    return "\n".join(lines)


def _printable(value: Any) -> Any:
    """``value`` (a notification's JSON) with every string, keys too, printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Print (and with --record, keep) every notification delivered until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m trainwatch.webhook",
                                     description="print Alertmanager's webhook notifications")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"on 127.0.0.1 (default {DEFAULT_PORT}, where the shipped "
                       "alertmanager.yml sends)")
    where.add_argument("--web.listen-address", dest="listen", metavar="HOST:PORT",
                       help="where to listen, as the stack's other services take it")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="append each notification to FILE as a JSON line with its time")
    parser.add_argument("--runbooks", type=Path, metavar="FILE",
                        help=f"serve this Markdown runbook as HTML at {RUNBOOKS_PATH}")
    args = parser.parse_args(argv)
    host, port = "127.0.0.1", args.port
    if args.listen:
        host, _, port_text = args.listen.rpartition(":")
        if not port_text.isdigit():
            parser.error(f"--web.listen-address: {args.listen!r} is not HOST:PORT")
        host, port = host or "127.0.0.1", int(port_text)
    try:
        templates = project_file("prometheus/alertmanager/templates")
    except StackError as err:
        print(f"trainwatch.webhook: error: {err}", file=sys.stderr)
        return 2

    def show(note: Notification) -> None:
        if args.record:
            record(args.record, note)
        print(f"--- {stamp()} via receiver {printable(str(note.get('receiver')))}\n"
              f"{notification_text(note, templates)}", flush=True)

    try:
        receiver = WebhookReceiver(host, port, on_notification=show, runbooks=args.runbooks)
    except OSError as err:
        print(f"trainwatch.webhook: error: cannot listen on {host}:{port} "
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
