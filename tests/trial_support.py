"""Helpers for the trial_instrumentation tests (no tests here): misbehaving gateways that are
real loopback servers, a timed CPU loop, and readers for what reached the Pushgateway (a gateway
that never answers, and the CPU spin, are benchmarks/http_load.py's and benchmarks/cpu.py's)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

from prometheus_client.parser import text_string_to_metric_families

import trial_instrumentation as ti
from benchmarks.cpu import spin
from benchmarks.stack import REPO, Service, free_port, http_get

EXAMPLES = REPO / "examples"


class StatusServer:
    """A real HTTP server answering every request with ``status`` (changeable; ``by_method``
    overrides it per method) and recording each request."""

    def __init__(self, status: int, body: bytes = b"no") -> None:
        self.status = status
        self.by_method: dict[str, int] = {}
        self.requests: list[str] = []
        self.paths: list[str] = []
        self.bodies: list[bytes] = []
        self.times: list[float] = []  # time.monotonic() of each request's arrival
        self.authorization: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                owner.times.append(time.monotonic())
                owner.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner.paths.append(self.path)
                owner.authorization.append(self.headers.get("Authorization"))
                owner.requests.append(self.command)
                self.send_response(owner.by_method.get(self.command, owner.status))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_PUT = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the gateway is down)."""
    return f"http://127.0.0.1:{free_port()}"


def cpu_loop(trial: ti.Trial, steps: int, work: float = 0.001) -> list[float]:
    """A training loop with all six timings and ``work`` seconds of CPU per step; the wall
    time of each whole iteration, the loader's part included."""
    durations = []
    last = time.perf_counter()
    for _ in trial.loader(range(steps), samples=4):
        for name in ti.STANDARD_PHASES[1:]:
            with trial.phase(name):
                if name == ti.TRAIN_BATCH:
                    spin(work)
        now = time.perf_counter()
        durations.append(now - last)
        last = now
    return durations


def pushed(pgw: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every trainwatch sample on the Pushgateway: {(name, sorted labels): value}."""
    status, body = http_get(pgw.url + "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples if s.name.startswith("trainwatch_trial")}


def pushed_value(pgw: Service, name: str, **labels: str) -> float | None:
    """The value of the one pushed sample ``name`` whose labels include ``labels``."""
    found = [v for (n, lbls), v in pushed(pgw).items()
             if n == name and labels.items() <= dict(lbls).items()]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
    return found[0] if found else None


def run_example(args: Sequence[object], env: dict[str, str] | None = None, torchrun: bool = False,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run an example script like a user would; fails the test with its output on error."""
    python = Path(sys.executable)
    argv = ([str(python.parent / "torchrun"), "--nproc-per-node", "2"] if torchrun
            else [str(python)]) + [str(a) for a in args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    done = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout,
                          check=False,
                          cwd=REPO)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def run_script(script: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``script`` in a fresh interpreter from the repository root: the result and the seconds
    until the process exited (its abandoned daemon threads included)."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=20, check=False)
    return done, time.monotonic() - start


def load_example(name: str) -> ModuleType:
    """examples/NAME.py as a module, so a test calls its functions in process."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def held_loopback_port() -> Iterator[int]:
    """A loopback port held open (listening, never accepting): a trial's pull server cannot
    start on it (a taken port is logged and the trial times all the same), so no server thread
    waits out its half-second poll at each close."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]
