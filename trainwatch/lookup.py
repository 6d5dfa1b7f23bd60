"""Which Prometheus the operator's commands read when ``--prometheus`` is not given, and where
any other service of the running stack listens (gc's Pushgateway).

Read from the stack's pid records (``trainwatch.procs``) in its state directory
(``trainwatch.layout``): below ``trainwatch.stack``, which starts the services, and below the
commands that read them, so neither has to import the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainwatch import procs
from trainwatch.layout import ENV_STATE_DIR, StateDir
from trainwatch.procs import CorruptRecord, ProcRecord

ENV_PROMETHEUS = "TRAINWATCH_PROMETHEUS"
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
        return env[ENV_PROMETHEUS]
    return stack_url("prometheus", f"pass --prometheus URL, set {ENV_PROMETHEUS}", env)


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
