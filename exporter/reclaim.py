"""Giving memory back to the system after a flood of connections.

A connection that fails mid-handshake leaves reference cycles (the exception's traceback holds
the coroutine that holds the transport and its TLS buffers): only the cyclic collector frees
them, and an idle exporter allocates too little to trigger it. Once freed, glibc keeps the
space in its heap unless asked to trim it. ``Reclaimer`` does both, off the hot path: once
``every`` connections have ended, one ``gc.collect()`` and ``malloc_trim(0)`` run ``delay``
seconds later on the event loop (about 10 ms with a thousand dead connections here).

Threads that allocate at the same time get glibc arenas of their own (up to 8 per core), each
keeping what it freed; the exporter's scrape and lane threads allocate under the GIL, one at a
time, so ``Reclaimer`` caps them at ``MALLOC_ARENAS`` when it is made, before those threads
start (``MALLOC_ARENA_MAX`` does the same from the environment): 0 to 0.8 MiB (about 0.4)
less resident memory after 550 scrapes of 8 fake GPUs, in three runs each way.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
from collections.abc import Callable

# mallopt's parameter for the most arenas glibc makes (malloc.h), and the cap used here.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2


def _libc(function: str) -> Callable[..., int] | None:
    try:  # glibc only; elsewhere collecting is all there is
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return getattr(libc, function)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_TRIM = _libc("malloc_trim")
_MALLOPT = _libc("mallopt")


def limit_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``count`` for threads started from now on; False where
    there is no glibc or the environment already set ``MALLOC_ARENA_MAX``."""
    if _MALLOPT is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(_MALLOPT(M_ARENA_MAX, count))


def reclaim() -> None:
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


class Reclaimer:
    """Counts ended connections; schedules ``reclaim()`` once ``every`` of them have ended."""

    def __init__(self, every: int = 64, delay: float = 1.0) -> None:
        limit_arenas()
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
