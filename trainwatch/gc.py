"""`trainwatch gc`: retire trial groups: ended ones once scraped, silent ones after ``--max-age``.

A trial never deletes its own Pushgateway group (docs/design.md, "The life of a group"): its
final push carries ``trainwatch_trial_exit{reason}`` and stays until Prometheus has scraped it.
gc deletes such an *ended* group once its last push is older than ``--ended-after`` (default 2m,
a few scrape intervals), and any other group whose pushes stopped longer ago than ``--max-age``
(a trial that died without a word: SIGKILL, an OOM kill, a lost node). The Pushgateway stamps
every group with ``push_time_seconds``, the time of its last successful push; a group that is
pushing is never touched (each candidate is read again just before its delete). `trainwatch
stack up` runs it on a schedule, the chart as a CronJob; or run it from cron or by hand:

    trainwatch gc --pushgateway http://pushgateway:9091 [--ended-after 2m] [--max-age 1h] [--dry-run]

Without --pushgateway it reads $TRAINWATCH_PUSHGATEWAY, else the running `trainwatch stack`'s.
Basic auth comes from $TRAINWATCH_PUSHGATEWAY_USERNAME / _PASSWORD, as for the trials.

A group that announces its push interval (``trainwatch_trial_push_interval_seconds``, pushed
by every trial) is never retired as silent before two of its intervals have passed, whatever
``--max-age`` says (an interval above a day counts as a day). No group jams a pass: one whose
DELETE fails (a 431 for a name too long for a request line, a 5xx) is reported, once per
process, on one bounded line with how to remove it by hand, and the pass goes on with the
others; one without a push time is left alone and reported likewise. A pass stops deleting
when ``--budget`` (default 60 s) is spent, oldest groups first, and names what it left for the
next pass. Exit codes: 0 every due group was deleted (or none was due); 1 the pass left some
(could not delete, no push time, the budget ran out); 2 a usage error or a Pushgateway that
cannot be read, or that stopped answering during the pass (which then stops).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwatch.cliutil import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    LATEST_TIME,
    MAX_TIMEOUT,
    bounded,
    duration,
)
from trainwatch.httpget import ResponseTooLarge, fetch
from trainwatch.lookup import NoPrometheus, pushgateway_url
from trial_instrumentation import names

# An ended group's final push must be scraped before it goes: a few scrape intervals.
ENDED_AFTER = 120.0
# The shortest --max-age gc takes: six of the trials' default 10 s push intervals. A live
# trial's group is never older than one interval plus a push's retries; an age below that
# deleted live groups (3 s did, at the default interval), and the group came back at the next
# push without its history.
MIN_MAX_AGE = 60.0
# A pass's default time budget: then it stops deleting and leaves the rest for the next pass.
BUDGET = 60.0
# The longest announced push interval gc honours: a group that says it pushes once a year is
# kept two days, not two years.
MAX_HONOURED_INTERVAL = 86400.0
# A DELETE's URL path printed as a curl command up to this long; past it, the Pushgateway (1 MiB
# of request line and headers) refuses it by hand too.
MAX_SHOWN_PATH = 4096
# The groups this process already reported by name (could not delete, no push time): each is
# named once, later passes count it. `trainwatch stack`'s gc loop is one process.
_reported: set[tuple[tuple[str, str], ...]] = set()


class GcError(Exception):
    """The Pushgateway cannot be read or answered an error; the message says which."""


class Unreachable(GcError):
    """No answer at all (refused, reset, timed out): the next request would fare no better."""


@dataclass(frozen=True)
class Group:
    labels: Mapping[str, str]  # job and the grouping key
    pushed_at: float  # Unix time of the last successful push
    ended: bool = False  # its last push was a trial's final one (trainwatch_trial_exit)
    interval: float | None = None  # its announced push interval, seconds, if any

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))

    def path(self) -> str:
        """The group's URL path; base64 values survive slashes and empty strings."""
        parts = [f"job@base64/{_b64(self.labels['job'])}"]
        parts += [f"{name}@base64/{_b64(value)}" for name, value in sorted(self.labels.items())
                  if name != "job"]
        return "/metrics/" + "/".join(parts)

    def describe(self) -> str:
        """Its grouping key on one bounded line (each value at most 200 characters shown)."""
        return ",".join(f"{bounded(k)}={bounded(v)}" for k, v in sorted(self.labels.items())
                        if k != "job")


@dataclass
class Sweep:
    """What one pass did: the groups deleted (or, dry, due), those whose DELETE failed (with
    why), and those due but left for the next pass when the budget ran out."""

    deleted: list[Group] = field(default_factory=list)
    failed: list[tuple[Group, str]] = field(default_factory=list)
    left: list[Group] = field(default_factory=list)
    lost: str | None = None  # why the pass stopped when the Pushgateway stopped answering


class Pushgateway:
    """The few calls the janitor makes; ``GcError`` for anything that goes wrong."""

    def __init__(self, url: str, timeout: float, env: Mapping[str, str]) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers: dict[str, str] = {}
        user, password = env.get(names.ENV_USERNAME), env.get(names.ENV_PASSWORD)
        if user is not None and password is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        # The labels of the groups of the job whose push time is no Unix time (missing, NaN,
        # ±Inf, 1e308), as the last groups() found them: never deleted, and reported.
        self.undated: list[Mapping[str, str]] = []

    def groups(self, job: str) -> list[Group]:
        body = self._call("GET", "/api/v1/metrics")
        try:
            entries = json.loads(body)["data"]
        except RecursionError:  # Python's parser recurses, ~1,000 levels deep at most
            raise GcError(f"{self.url}/api/v1/metrics: not a Pushgateway's answer (JSON nested "
                          "deeper than Python's parser goes; a Pushgateway's is a few levels "
                          "deep)") from None
        except (ValueError, KeyError, TypeError):
            entries = None
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("labels"), dict)
                and all(isinstance(v, str) for v in e["labels"].values()) for e in entries):
            raise GcError(f"{self.url}/api/v1/metrics: not a Pushgateway's answer (a list of "
                          "groups, each with its labels)")
        found, self.undated = [], []
        for entry in entries:
            if entry["labels"].get("job") == job:
                group = _group(entry)
                if group is None:
                    self.undated.append(entry["labels"])
                else:
                    found.append(group)
        return found

    def delete(self, group: Group) -> None:
        self._call("DELETE", group.path())

    def _call(self, method: str, path: str) -> bytes:
        """The body of one request, bounded in size and time (trainwatch.httpget)."""
        try:
            answer = fetch(self.url + path, timeout=self.timeout, method=method,
                           headers=self.headers)
        except ResponseTooLarge as err:
            raise GcError(f"{method} {self.url}{bounded(path)}: {err}") from None
        except TimeoutError:
            raise Unreachable(f"{method} {self.url}{bounded(path)}: no complete answer within "
                              f"{self.timeout:g} s (--timeout)") from None
        except (OSError, http.client.HTTPException) as err:
            raise Unreachable(f"cannot reach the Pushgateway at {self.url}: "
                              f"{bounded(str(err))}") from None
        if answer.status >= 400:
            raise GcError(f"{method} {self.url}{bounded(path)}: {answer.status} "
                          f"{bounded(answer.reason)}")
        return answer.body

    def by_hand(self, group: Group) -> str:
        """How to remove ``group`` without gc: a curl command, when its path can be sent."""
        path = group.path()
        auth = (f' -u "${names.ENV_USERNAME}:${names.ENV_PASSWORD}"'
                if "Authorization" in self.headers else "")
        if len(path) <= MAX_SHOWN_PATH:
            return f"curl -X DELETE{auth} '{self.url}{path}'"
        return (f"its URL path is {len(path)} characters, more than a Pushgateway reads: only "
                f"curl -X PUT{auth} '{self.url}/api/v1/admin/wipe' (a Pushgateway run with "
                "--web.enable-admin-api; it deletes every group) or restarting a Pushgateway "
                "that does not persist removes it")


def _group(entry: Any) -> Group | None:
    try:
        labels = {str(k): str(v) for k, v in entry["labels"].items()}
        pushed_at = float(entry["push_time_seconds"]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError):
        return None  # a group we cannot date is never deleted
    if not 0 <= pushed_at <= LATEST_TIME:  # NaN, ±Inf, 1e308: no date either
        return None
    return Group(labels, pushed_at, ended=names.EXIT in entry, interval=_interval(entry))


def _interval(entry: Any) -> float | None:
    """The group's announced push interval (seconds, at most MAX_HONOURED_INTERVAL); None
    where it announces none that is a positive number."""
    try:
        value = float(entry[names.PUSH_INTERVAL]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    return min(value, MAX_HONOURED_INTERVAL) if value > 0 else None  # NaN is not > 0


def collect(gateway: Pushgateway, job: str, max_age: float, dry_run: bool,
            now: float | None = None, ended_after: float | None = None) -> list[Group]:
    """The groups :func:`sweep` deleted (or, ``dry_run``, would delete), oldest first."""
    return sweep(gateway, job, max_age, dry_run, now, ended_after).deleted


def sweep(gateway: Pushgateway, job: str, max_age: float, dry_run: bool,
          now: float | None = None, ended_after: float | None = None,
          budget: float | None = None, clock: Any = time.monotonic) -> Sweep:
    """Delete (unless ``dry_run``) the groups of ``job`` whose last push is older than
    ``max_age`` (and than two of their announced push intervals), or than ``ended_after`` for
    an ended group (None: ``max_age`` too), oldest first, until ``budget`` seconds of ``clock``
    have passed since the pass began; a failed DELETE is noted and the pass goes on."""
    began = clock()
    ended_age = max_age if ended_after is None else ended_after

    def stale(groups: list[Group]) -> dict[tuple[tuple[str, str], ...], Group]:
        at = time.time() if now is None else now
        return {g.key: g for g in groups
                if at - g.pushed_at > (ended_age if g.ended else
                                       max(max_age, 2 * (g.interval or 0.0)))}

    candidates = stale(gateway.groups(job))
    if dry_run or not candidates:
        return Sweep(deleted=sorted(candidates.values(), key=lambda g: g.pushed_at))
    still = stale(gateway.groups(job))  # a group that pushed meanwhile is alive again
    due = sorted((still[key] for key in candidates if key in still), key=lambda g: g.pushed_at)
    done = Sweep()
    for at, group in enumerate(due):
        if budget is not None and clock() - began >= budget:
            done.left = due[at:]
            break
        try:
            gateway.delete(group)
        except Unreachable as err:  # the rest would each wait or fail the same way
            done.left, done.lost = due[at:], str(err)
            break
        except GcError as err:
            done.failed.append((group, str(err)))
        else:
            done.deleted.append(group)
    return done


def add_parser(commands: Any) -> None:
    """Add `gc` to the `trainwatch` command's subcommands."""
    gc = commands.add_parser("gc", help="retire ended and silent trial groups",
                             description=__doc__.split("\n\n")[0])
    gc.add_argument("--pushgateway", metavar="URL", help=f"default: ${names.ENV_PUSHGATEWAY}, "
                    "else the running `trainwatch stack`'s")
    gc.add_argument("--max-age", type=duration, default=3600.0, metavar="DURATION",
                    help="delete groups whose last push is older than this; at least "
                    f"{MIN_MAX_AGE:g}s, well above the trials' push interval (default 1h)")
    gc.add_argument("--ended-after", type=duration, default=ENDED_AFTER, metavar="DURATION",
                    help="delete an ended trial's group (its final push said so) once that push "
                    "is older than this: long enough for Prometheus to scrape it (default 2m)")
    gc.add_argument("--job", default=names.JOB, help=f"Pushgateway job (default {names.JOB})")
    gc.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    gc.add_argument("--timeout", type=duration, default=10.0, metavar="DURATION",
                    help="each request's whole time, seconds (default 10)")
    gc.add_argument("--budget", type=duration, default=BUDGET, metavar="DURATION",
                    help="stop deleting once a pass has taken this long and leave the rest, "
                    f"named, for the next pass (default {BUDGET:g}s)")


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    refused = _refused(args)
    if refused:
        print(f"trainwatch gc: error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    try:
        gateway = Pushgateway(pushgateway_url(args.pushgateway, env), args.timeout, env)
        passed = sweep(gateway, args.job, args.max_age, args.dry_run,
                       ended_after=args.ended_after, budget=args.budget)
    except (GcError, NoPrometheus) as err:
        print(f"trainwatch gc: error: {bounded(str(err), 2000)}", file=sys.stderr)
        return EXIT_USAGE
    verb = "to delete" if args.dry_run else "deleted"
    for group in passed.deleted:
        print(f"{verb} {group.describe()} ({_state(group)})")
    for group, why in passed.failed:
        if _first_report(group.labels):
            print(f"trainwatch gc: cannot delete {group.describe()} ({_state(group)}): {why}; "
                  f"left, and named once per process; by hand: {gateway.by_hand(group)}",
                  file=sys.stderr)
    for labels in gateway.undated:
        if _first_report(labels):
            print(f"trainwatch gc: no push time that is a Unix time (push_time_seconds) on "
                  f"{Group(labels, 0.0).describe()}: left alone, named once per process; by "
                  f"hand: {gateway.by_hand(Group(labels, 0.0))}", file=sys.stderr)
    if passed.lost is not None:
        print(f"trainwatch gc: error: {passed.lost}; the pass stopped, {len(passed.left)} "
              "group(s) due left for the next pass", file=sys.stderr)
    elif passed.left:
        print(f"trainwatch gc: the pass's budget (--budget {args.budget:g}s) ran out: "
              f"{len(passed.left)} group(s) due left for the next pass, the oldest "
              f"{passed.left[0].describe()} ({_state(passed.left[0])})", file=sys.stderr)
    said = [f"{len(passed.deleted)} group(s) {verb} of job {args.job} on {gateway.url}"]
    said += [f"{len(passed.failed)} could not be deleted"] if passed.failed else []
    said += [f"{len(gateway.undated)} without a push time left alone"] if gateway.undated else []
    said += [f"{len(passed.left)} left for the next pass"] if passed.left else []
    print("; ".join(said), file=sys.stderr)
    if passed.lost is not None:
        return EXIT_USAGE
    return EXIT_FOUND if passed.failed or passed.left or gateway.undated else EXIT_OK


def _state(group: Group) -> str:
    return (f"{'ended' if group.ended else 'silent'}, last push "
            f"{time.time() - group.pushed_at:.0f} s ago")


def _first_report(labels: Mapping[str, str]) -> bool:
    """Whether this process names the group now: the first time it is reported."""
    key = tuple(sorted(labels.items()))
    if key in _reported:
        return False
    _reported.add(key)
    return True


def _refused(args: argparse.Namespace) -> str | None:
    """Why the arguments would delete what they must not (or cannot work), if they would."""
    if args.max_age < MIN_MAX_AGE:
        return (f"--max-age {args.max_age:g}s is below {MIN_MAX_AGE:g}s: it would delete the "
                "groups of live trials between two pushes; ended trials' groups go after "
                "--ended-after")
    if args.ended_after <= 0:
        return "--ended-after must be above 0 s: Prometheus must scrape the final push first"
    if args.timeout <= 0:
        return f"--timeout {args.timeout:g} is not above 0 seconds"
    if args.timeout > MAX_TIMEOUT:
        return f"--timeout {args.timeout:g} is above {MAX_TIMEOUT:g} seconds (a day)"
    if args.budget <= 0:
        return f"--budget {args.budget:g}s is not above 0 s"
    return None


def _b64(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode() or "="
