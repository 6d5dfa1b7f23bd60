"""The background pusher: every interval, push the trial's registry; at exit, a bounded
final push. The group is never deleted here (`trainwatch gc` retires it). Nothing here runs on the training thread and
nothing raises out of it: failures are counted, logged once per outage, and retried.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, push_to_gateway

from trial_instrumentation import names
from trial_instrumentation.collector import TrialState
from trial_instrumentation.config import TrialConfig
from trial_instrumentation.transport import PushError, make_handler

log = logging.getLogger(__name__)
RETRIES = 2  # extra attempts per push, with exponential backoff
# The first backoff is a quarter of the push interval (so retries fit in one interval), capped.
MAX_FIRST_BACKOFF_SECONDS = 1.0
# Each wait between pushes is the interval +-10%, drawn afresh (see jittered()).
JITTER = 0.1


class Pusher:
    """Pushes ``registry`` to ``config.pushgateway`` from a daemon thread.

    Example (``Trial`` does this)::

        config = resolve(pushgateway="http://127.0.0.1:9091", experiment="e", trial="t")
        pusher = Pusher(config, CollectorRegistry(), TrialState(config.buckets, {}))
        pusher.start()
        ...
        pusher.stop(timeout=config.exit_timeout)
    """

    def __init__(self, config: TrialConfig, registry: CollectorRegistry,
                 state: TrialState) -> None:
        self._config = config
        self._registry = registry
        self._state = state
        state.push_interval = config.push_interval  # pushed with the group: gc keeps it two
        self._handler = make_handler(config.connect_timeout, config.read_timeout,
                                     config.username, config.password)
        self._stopping = threading.Event()
        self._failing_since: float | None = None
        self._pushed = 0  # pushes that succeeded
        self._last_error: str | None = None
        self._backoff = min(config.push_interval / 4, MAX_FIRST_BACKOFF_SECONDS)
        self._thread = threading.Thread(target=self._run, name="trainwatch-pusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """The final push (the group stays for `trainwatch gc`); False if not done in
        ``timeout``."""
        self._stopping.set()
        self._thread.join(timeout)
        if self._pushed == 0:
            # The one summary a user needs: nothing of this run reached Prometheus.
            log.warning("trainwatch: no push to %s succeeded in this run (%d failed; last error: "
                        "%s): none of this trial's timings reached the Pushgateway",
                        self._config.pushgateway, self._state.push_failures,
                        self._last_error or "none finished in time")
        if self._thread.is_alive():
            log.warning("trainwatch: final push to %s did not finish within %.1fs; giving up "
                        "(the group is left for the staleness alert)",
                        self._config.pushgateway, timeout)
            return False
        return True

    def _run(self) -> None:
        # Push at once (the trial shows up before its first interval), then every interval.
        while True:
            self._with_retries(self._push, wait=self._stopping.wait)
            if self._stopping.wait(jittered(self._config.push_interval)):
                break
        self._with_retries(self._push, wait=_sleep)

    def _push(self) -> None:
        push_to_gateway(self._config.pushgateway or "", names.JOB, self._registry,
                        grouping_key=self._config.grouping_key, handler=self._handler)

    def _with_retries(self, action: Callable[[], None], wait: Callable[[float], bool]) -> bool:
        """Run ``action`` up to 1 + RETRIES times; ``wait`` returning True aborts the backoff."""
        for attempt in range(1 + RETRIES):
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - the thread boundary: nothing escapes
                self._failed(action, exc)
                retryable = not isinstance(exc, PushError) or exc.retryable
                if not retryable or attempt == RETRIES or wait(self._backoff * 2**attempt):
                    return False
            else:
                if action == self._push:
                    self._pushed += 1
                self._recovered()
                return True
        return False

    def _failed(self, action: Callable[[], None], exc: Exception) -> None:
        if action == self._push:
            self._state.push_failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning("trainwatch: %s to %s failed: %s: %s (training goes on; retrying, "
                        "logging again when it recovers)", action.__name__.strip("_"),
                        self._config.pushgateway, type(exc).__name__, exc)

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.warning("trainwatch: Pushgateway %s reachable again after %.1fs",
                        self._config.pushgateway, time.monotonic() - self._failing_since)
            self._failing_since = None


def jittered(interval: float, draw: Callable[[], float] | None = None) -> float:
    """``interval`` moved by up to ``JITTER`` of itself either way, drawn afresh each time.

    Two processes started together under one key would otherwise push in lockstep, one always
    just after the other, and every scrape would see the same writer (TrainwatchTrialKeyShared
    saw one pid for 200 s); a fleet started together would push in bursts.

    >>> jittered(10.0, lambda: 0.0), jittered(10.0, lambda: 0.5), jittered(10.0, lambda: 1.0)
    (9.0, 10.0, 11.0)
    """
    return interval * (1 + JITTER * (2 * (draw or random.random)() - 1))


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False
