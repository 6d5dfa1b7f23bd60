"""Giving memory back to the system after a flood of connections.

A connection that fails mid-handshake leaves reference cycles (the exception's traceback holds
the coroutine that holds the transport and its TLS buffers): only the cyclic collector frees
them, and an idle exporter allocates too little to trigger it. Once freed, glibc keeps the
space in its heap unless asked to trim it. ``Reclaimer`` does both, off the hot path: once
``every`` connections have ended, one ``gc.collect()`` and ``malloc_trim(0)`` run ``delay``
seconds later on the event loop (about 10 ms with a thousand dead connections here).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:  # glibc only; elsewhere collecting is all there is
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def reclaim() -> None:
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


class Reclaimer:
    """Counts ended connections; schedules ``reclaim()`` once ``every`` of them have ended."""

    def __init__(self, every: int = 64, delay: float = 1.0) -> None:
        self.every, self.delay = every, delay
        self.ended = 0
        self.runs = 0
        self._pending = False

    def ended_one(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ended += 1
        if self.ended >= self.every and not self._pending:
            self._pending = True
            loop.call_later(self.delay, self._run)

    def _run(self) -> None:
        self._pending, self.ended = False, 0
        self.runs += 1
        reclaim()
