"""A pytest plugin (tests/conftest.py loads it): SIGTERM to the pytest process is a
KeyboardInterrupt, so pytest tears its fixtures down before it exits.

The live stacks start Prometheus, the Pushgateway and the trials in sessions of their own
(``start_new_session``), so nothing but their fixtures' teardown stops them. Python's default
SIGTERM ends the process at once: `timeout 1500 pytest`, a CI job's cancel or a `kill` left every
stack of the run going, scraping and training, for as long as the machine stayed up.

Only the pytest process itself is changed: a process forked from it (a DataLoader worker, a
multiprocessing child) gets the default SIGTERM back when it is signalled, and dies of it.
"""

from __future__ import annotations

import os
import signal
import types

_PYTEST_PID = os.getpid()


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    if os.getpid() != _PYTEST_PID:  # a forked child: die of it, as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt(f"signal {signum} (SIGTERM): tearing the fixtures down")


def pytest_configure() -> None:
    global _PYTEST_PID
    _PYTEST_PID = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)
