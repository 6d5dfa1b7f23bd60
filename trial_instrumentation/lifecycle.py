"""How a trial's process ends, told to the Pushgateway: SIGTERM and uncaught exceptions.

Kubernetes evicts and preempts with SIGTERM; by default Python dies of it at once and the
trial's group is left with no word of why. While a trial pushes, SIGTERM first pushes the final
state marked ``terminated`` (bounded by ``exit_timeout``) and then does what it did before:
the handler that was installed (the user's own) runs, or the default action kills the process
with the same signal. (An exception that leaves the ``with`` block pushes ``failed``: that is
``Trial.__exit__``.) The handler is removed when the trial closes, and not installed off the
main thread (Python allows signal handlers only there).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from trial_instrumentation import names


class ExitHooks:
    """Installed by ``Trial.start`` when pushing; ``finish(reason)`` closes the trial."""

    def __init__(self, finish: Callable[[str], None]) -> None:
        self._finish = finish
        self._previous_signal: Any = None
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_IGN or previous is None:
            return  # the user asked for SIGTERM to be ignored (or a C handler owns it)
        self._previous_signal = previous
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True

    def uninstall(self) -> None:
        """Put back what was there, unless someone replaced our hooks meanwhile."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._installed = False
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_signal)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_signal
        self._finish(names.EXIT_TERMINATED)  # uninstalls us
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL: die of the signal, as without trainwatch (exit status 128 + 15)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
