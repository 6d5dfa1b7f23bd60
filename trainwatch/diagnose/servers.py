"""Several Prometheus servers (`--prometheus` repeated): the shards of a Prometheus sharded by
trial (helm/README.md, "Sharding"). Each trial's series live on exactly one of them, so a
command about one trial reads the server that holds it, and `trials` lists every server's.

With one server nothing is asked: it is the one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from trainwatch.contract.promql import select
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trial_instrumentation import names

# How far back a trial is looked for without --since: a year of the trial's info series, found
# through the index (/api/v1/series), not by reading samples.
LOOKBACK_SECONDS = 365 * 86400.0


class NotOnAnyServer(LookupError):
    """No server given holds the trial; the message names each and what it said."""


def holds(api: PrometheusAPI, experiment: str, trial: str | None, since: float | None) -> bool:
    """Whether ``api``'s server has any series of the experiment (and trial) since then."""
    now = time.time()
    info = select(names.TRIAL_INFO, experiment=experiment, trial=trial)
    found = api.get("series", **{"match[]": info,
                                 "start": f"{now - (since or LOOKBACK_SECONDS):.3f}",
                                 "end": f"{now:.3f}"})
    return bool(found)


def holding(apis: Sequence[PrometheusAPI], experiment: str, trial: str | None,
            since: float | None) -> PrometheusAPI:
    """The first server holding the experiment (and trial); one server is returned unasked.

    Raises NotOnAnyServer naming each server and why it was passed over (no such trial, or the
    error reaching it), when none holds it."""
    if len(apis) == 1:
        return apis[0]
    passed = []
    for api in apis:
        try:
            if holds(api, experiment, trial, since):
                return api
            passed.append(f"{api.url}: no such trial")
        except PrometheusError as err:
            passed.append(f"{api.url}: {err}")
    what = experiment if trial is None else f"{experiment}/{trial}"
    raise NotOnAnyServer(f"no Prometheus given holds {what} ({'; '.join(passed)})")
