"""Which Prometheus the operator's commands read when ``--prometheus`` is not given."""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainwatch.stack import procs
from trainwatch.stack.inventory import listen_port
from trainwatch.stack.layout import ENV_STATE_DIR, StateDir
from trainwatch.stack.procs import CorruptRecord, ProcRecord

ENV_PROMETHEUS = "TRAINWATCH_PROMETHEUS"


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
