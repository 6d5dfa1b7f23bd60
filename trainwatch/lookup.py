"""Which Prometheus the operator's commands read when ``--prometheus`` is not given, and where
any other service of the running stack listens (gc's Pushgateway).

Read from the stack's pid records (``trainwatch.procs``) in its state directory
(``trainwatch.layout``): below ``trainwatch.stack``, which starts the services, and below the
commands that read them, so neither has to import the other.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from trainwatch import httpget, procs
from trainwatch.layout import ENV_STATE_DIR, StateDir
from trainwatch.procs import CorruptRecord, ProcRecord
from trial_instrumentation import names

ENV_PROMETHEUS = names.CLI_ENV_PROMETHEUS
# How the stack tells each of its services where to listen; read back from a process's argv.
LISTEN_FLAG = "--web.listen-address="


class NoPrometheus(ValueError):
    """No URL given and no running stack to take one from (Prometheus or another service)."""


def prometheus_url(given: str | None, env: Mapping[str, str] | None = None) -> str:
    """``given``, else ``$TRAINWATCH_PROMETHEUS``, else the Prometheus of the stack running in
    ``$TRAINWATCH_STATE_DIR`` (or the default state directory).

    Example:
        >>> prometheus_url("http://prometheus:9090")
        'http://prometheus:9090'
        >>> prometheus_url(None, {"TRAINWATCH_PROMETHEUS": "http://127.0.0.1:9090"})
        'http://127.0.0.1:9090'
    """
    env = os.environ if env is None else env
    if given:
        return given
    if env.get(ENV_PROMETHEUS):
        if env.get(ENV_STATE_DIR):  # pointed at a stack twice: say where they disagree
            note = stack_note(env[ENV_PROMETHEUS], StateDir.resolve(None, env))
            if note:
                print(f"trainwatch: note: {note}", file=sys.stderr)
        return env[ENV_PROMETHEUS]
    return stack_url("prometheus", f"pass --prometheus URL, set {ENV_PROMETHEUS}", env)


def pushgateway_url(given: str | None, env: Mapping[str, str] | None = None) -> str:
    """``given``, else ``$TRAINWATCH_PUSHGATEWAY``, else the Pushgateway of the running stack:
    the one lookup of gc, `baseline set|clear` and `trainwatch run`.

    >>> pushgateway_url(None, {"TRAINWATCH_PUSHGATEWAY": "http://127.0.0.1:9091"})
    'http://127.0.0.1:9091'
    """
    env = os.environ if env is None else env
    return given or env.get(names.ENV_PUSHGATEWAY) or stack_url(
        "pushgateway", f"pass --pushgateway URL, set {names.ENV_PUSHGATEWAY}", env)


def stack_url(service: str, otherwise: str, env: Mapping[str, str] | None = None) -> str:
    """The URL of ``service`` in the stack running in ``$TRAINWATCH_STATE_DIR`` (or the
    default state directory); ``NoPrometheus`` saying ``otherwise`` when none runs."""
    env = os.environ if env is None else env
    state = StateDir.resolve(None, env)
    try:
        record: ProcRecord | None = ProcRecord.load(state.pid_file(service))
    except (CorruptRecord, OSError):
        record = None
    port = listen_port(record) if record else None
    if record is None or port is None or not procs.is_ours(record, str(state.root)):
        raise NoPrometheus(f"no {service.capitalize()}: {otherwise}, or start one with "
                           f"`trainwatch stack up` (none runs with state in {state.root}; "
                           f"{ENV_STATE_DIR} picks another)")
    return f"http://127.0.0.1:{port}"


def listen_port(record: ProcRecord) -> int | None:
    """The port a service was started with (its ``--web.listen-address=HOST:PORT``), or None."""
    for arg in record.argv:
        if arg.startswith(LISTEN_FLAG):
            return int(arg.rsplit(":", 1)[1])
    return None


def stack_note(url: str, state: StateDir, timeout: float = 2.0) -> str | None:
    """One line when the Prometheus at ``url`` ($TRAINWATCH_PROMETHEUS) is not the stack's of
    ``state`` ($TRAINWATCH_STATE_DIR): another stack's, or no trainwatch stack's (told by its
    ``--storage.tsdb.path``); None when it is, or its flags cannot be read (the command then
    says what is wrong with the server)."""
    try:
        answer = httpget.fetch(url.rstrip("/") + "/api/v1/status/flags", timeout=timeout)
        tsdb = Path(json.loads(answer.body)["data"]["storage.tsdb.path"])
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
        return None
    return mismatch(url, tsdb, state)


def mismatch(url: str, tsdb: Path, state: StateDir) -> str | None:
    """What :func:`stack_note` says, from the Prometheus's data directory.

    >>> s = StateDir(Path("/tmp/mine"))
    >>> mismatch("http://127.0.0.1:9090", Path("/tmp/mine/prometheus/data"), s) is None
    True
    >>> print(mismatch("http://127.0.0.1:9090", Path("/home/ann/.local/state/trainwatch/prometheus/data"), s))
    Prometheus at http://127.0.0.1:9090 ($TRAINWATCH_PROMETHEUS) is the trainwatch stack's in \
/home/ann/.local/state/trainwatch, not the one in /tmp/mine ($TRAINWATCH_STATE_DIR): unset \
TRAINWATCH_PROMETHEUS to read /tmp/mine's
    """
    ours = StateDir(tsdb.parent.parent).data("prometheus") / "data"
    if tsdb == state.data("prometheus") / "data":
        return None
    whose = (f"the trainwatch stack's in {tsdb.parent.parent}" if tsdb.is_absolute()
             and tsdb == ours else f"no trainwatch stack's (its data: {tsdb})")
    return (f"Prometheus at {url} (${ENV_PROMETHEUS}) is {whose}, not the one in {state.root} "
            f"(${ENV_STATE_DIR}): unset {ENV_PROMETHEUS} to read {state.root}'s")
