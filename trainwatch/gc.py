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
from dataclasses import dataclass
from typing import Any

from trainwatch.cliutil import EXIT_OK, EXIT_USAGE, LATEST_TIME, MAX_TIMEOUT, duration
from trainwatch.httpget import ResponseTooLarge, fetch
from trainwatch.lookup import NoPrometheus, stack_url
from trial_instrumentation import names

# An ended group's final push must be scraped before it goes: a few scrape intervals.
ENDED_AFTER = 120.0
# The shortest --max-age gc takes: six of the trials' default 10 s push intervals. A live
# trial's group is never older than one interval plus a push's retries; an age below that
# deleted live groups (3 s did, at the default interval), and the group came back at the next
# push without its history.
MIN_MAX_AGE = 60.0


class GcError(Exception):
    """The Pushgateway cannot be read or answered an error; the message says which."""


@dataclass(frozen=True)
class Group:
    labels: Mapping[str, str]  # job and the grouping key
    pushed_at: float  # Unix time of the last successful push
    ended: bool = False  # its last push was a trial's final one (trainwatch_trial_exit)

    def path(self) -> str:
        """The group's URL path; base64 values survive slashes and empty strings."""
        parts = [f"job@base64/{_b64(self.labels['job'])}"]
        parts += [f"{name}@base64/{_b64(value)}" for name, value in sorted(self.labels.items())
                  if name != "job"]
        return "/metrics/" + "/".join(parts)

    def describe(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if k != "job")


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
            raise GcError(f"{method} {self.url}{path}: {err}") from None
        except TimeoutError:
            raise GcError(f"{method} {self.url}{path}: no complete answer within "
                          f"{self.timeout:g} s (--timeout)") from None
        except (OSError, http.client.HTTPException) as err:
            raise GcError(f"cannot reach the Pushgateway at {self.url}: {err}") from None
        if answer.status >= 400:
            raise GcError(f"{method} {self.url}{path}: {answer.status} {answer.reason}")
        return answer.body


def _group(entry: Any) -> Group | None:
    try:
        labels = {str(k): str(v) for k, v in entry["labels"].items()}
        pushed_at = float(entry["push_time_seconds"]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError):
        return None  # a group we cannot date is never deleted
    if not 0 <= pushed_at <= LATEST_TIME:  # NaN, ±Inf, 1e308: no date either
        return None
    return Group(labels, pushed_at, ended=names.EXIT in entry)


def collect(gateway: Pushgateway, job: str, max_age: float, dry_run: bool,
            now: float | None = None, ended_after: float | None = None) -> list[Group]:
    """Delete (unless ``dry_run``) and return the groups of ``job`` whose last push is older
    than ``max_age``, or than ``ended_after`` for an ended group (None: ``max_age`` too)."""
    ended_age = max_age if ended_after is None else ended_after

    def stale(groups: list[Group]) -> dict[tuple[tuple[str, str], ...], Group]:
        at = time.time() if now is None else now
        return {tuple(sorted(g.labels.items())): g for g in groups
                if at - g.pushed_at > (ended_age if g.ended else max_age)}

    candidates = stale(gateway.groups(job))
    if dry_run or not candidates:
        return list(candidates.values())
    still = stale(gateway.groups(job))  # a group that pushed meanwhile is alive again
    removed = []
    for key in candidates:
        if key in still:
            gateway.delete(still[key])
            removed.append(still[key])
    return removed


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


def run(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    refused = _refused(args)
    if refused:
        print(f"trainwatch gc: error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    try:
        url = args.pushgateway or env.get(names.ENV_PUSHGATEWAY) or stack_url(
            "pushgateway", f"pass --pushgateway URL, set {names.ENV_PUSHGATEWAY}", env)
        gateway = Pushgateway(url, args.timeout, env)
        groups = collect(gateway, args.job, args.max_age, args.dry_run,
                         ended_after=args.ended_after)
    except (GcError, NoPrometheus) as err:
        print(f"trainwatch gc: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    verb = "to delete" if args.dry_run else "deleted"
    for group in sorted(groups, key=lambda g: g.pushed_at):
        age = time.time() - group.pushed_at
        print(f"{verb} {group.describe()} ({'ended' if group.ended else 'silent'}, "
              f"last push {age:.0f} s ago)")
    done = f"{len(groups)} group(s) {verb} of job {args.job} on {gateway.url}"
    if gateway.undated:
        first = _shown(Group(gateway.undated[0], 0.0).describe())
        print(f"trainwatch gc: error: {gateway.url}: {len(gateway.undated)} group(s) of job "
              f"{args.job} without a push time that is a Unix time (push_time_seconds), left "
              f"alone ({first}); {done}", file=sys.stderr)
        return EXIT_USAGE
    print(done, file=sys.stderr)
    return EXIT_OK


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
    return None


def _shown(text: str, limit: int = 200) -> str:
    """``text`` on one line of printable characters, at most ``limit`` of them."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                   for c in text[:limit])
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _b64(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode() or "="
