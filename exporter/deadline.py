"""How long one scrape's device reads may take: Prometheus's scrape timeout, less a margin.

Prometheus sends its ``scrape_timeout`` with every scrape in the
``X-Prometheus-Scrape-Timeout-Seconds`` header. The HTTP layer turns it into a deadline for the
scrape (``scrape_deadline``); collectors whose source can hang (a GPU driver in a bad state)
stop waiting at ``current_deadline()`` and serve what answered. The margin leaves time for the
other collectors, rendering and the network, so the scrape still arrives before Prometheus
gives up on it. The budget is never below ``MIN_READ_SECONDS``: a client asking for 1 ms gets
its answer late, not an empty one, and never cuts reads short for the scrapes beside it.

>>> round(read_budget("2"), 2), read_budget(None), read_budget("soon"), read_budget("0.001")
(1.6, 9.0, 9.0, 0.5)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
# Prometheus's own default scrape_timeout: what a scraper that sends no header (curl, a
# browser, an older Prometheus) most likely waits.
DEFAULT_SCRAPE_TIMEOUT_SECONDS = 10.0
MARGIN_FRACTION = 0.2
MAX_MARGIN_SECONDS = 1.0
# NVML answers in milliseconds, PCIe sampling takes 20 ms: half a second reads every GPU.
MIN_READ_SECONDS = 0.5

_deadline: ContextVar[float | None] = ContextVar("trainwatch_scrape_deadline", default=None)


def read_budget(header: str | None) -> float:
    """Seconds the reads of one scrape may take, given the timeout header's value (or None)."""
    try:
        timeout = float(header) if header is not None else DEFAULT_SCRAPE_TIMEOUT_SECONDS
    except ValueError:
        timeout = DEFAULT_SCRAPE_TIMEOUT_SECONDS
    if not 0 < timeout < math.inf:  # also NaN
        timeout = DEFAULT_SCRAPE_TIMEOUT_SECONDS
    return max(MIN_READ_SECONDS, timeout - min(MAX_MARGIN_SECONDS, MARGIN_FRACTION * timeout))


@contextmanager
def scrape_deadline(header: str | None,
                    clock: Callable[[], float] = time.monotonic) -> Iterator[float]:
    """Within the block, ``current_deadline()`` is ``clock()`` now plus ``read_budget(header)``."""
    deadline = clock() + read_budget(header)
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def current_deadline(clock: Callable[[], float] = time.monotonic) -> float:
    """The deadline of the scrape being served; the default budget from now outside one."""
    deadline = _deadline.get()
    return deadline if deadline is not None else clock() + read_budget(None)
