"""Who holds a trial's group on the Pushgateway: this process, or another one with the same
experiment, trial and rank.

Two processes with one grouping key overwrite each other's pushes (a restarted rank while the
old one still runs, a copy-pasted launch script), and the first clean exit deleted the other's
live group. The group's ``trainwatch_trial_info{nodename, pid}`` says whose push it holds. The
Pushgateway has no per-group read, so this reads its whole list, ``/api/v1/metrics``: once when
the trial starts (to warn) and once before the clean exit's delete (to skip it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trial_instrumentation import names
from trial_instrumentation.transport import auth_headers, request

MAX_LIST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Holder:
    nodename: str
    pid: str
    pushed_at: float  # Unix time of the group's last successful push


def group_holder(pushgateway: str, grouping_key: Mapping[str, str], connect_timeout: float,
                 read_timeout: float, username: str | None = None,
                 password: str | None = None) -> Holder | None:
    """The process whose push the group holds; None if there is no such group."""
    body = request(pushgateway.rstrip("/") + "/api/v1/metrics", "GET", connect_timeout,
                   read_timeout, auth_headers(username, password), None, MAX_LIST_BYTES)
    wanted = {"job": names.JOB, **grouping_key}
    for entry in json.loads(body).get("data", []):
        if entry.get("labels") == wanted:
            return _holder(entry)
    return None


def _holder(entry: dict[str, Any]) -> Holder | None:
    try:
        labels = entry[names.TRIAL_INFO]["metrics"][0]["labels"]
        pushed_at = float(entry["push_time_seconds"]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return Holder(str(labels.get("nodename", "")), str(labels.get("pid", "")), pushed_at)
