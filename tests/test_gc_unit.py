"""trainwatch gc without a Pushgateway: its HTTP layer (trainwatch.httpget.fetch) replaced by a
fake that serves /api/v1/metrics from a list of groups and answers each DELETE as told, so
every decision (what is due, in what order, what is said, the exit code) is checked in
milliseconds. tests/test_gc.py runs the same code against a real Pushgateway."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterator
from http.client import RemoteDisconnected
from typing import Any

import pytest

from trainwatch import gc
from trainwatch.cliutil import LATEST_TIME
from trainwatch.httpget import Answer, ResponseTooLarge
from trial_instrumentation import names

URL = "http://pgw.test:9091"
JOB = names.JOB

# The command's wall clock, held still: "last push 7300 s ago" must not read 7301 because a
# loaded machine took a tenth of a second between the listing and the line.
WALL = 1_700_000_000.0


@pytest.fixture(autouse=True)
def still_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc.time, "time", lambda: WALL)


def ago(seconds: float) -> float:
    return WALL - seconds


def entry(pushed_at: float | str | None, ended: bool = False, interval: Any = None,
          job: str = JOB, **labels: str) -> dict[str, Any]:
    """One group as the Pushgateway's /api/v1/metrics lists it."""
    got: dict[str, Any] = {"labels": {"job": job, **labels}}
    if pushed_at is not None:
        got["push_time_seconds"] = {"metrics": [{"value": str(pushed_at)}]}
    if ended:
        got[names.EXIT] = {"metrics": [{"labels": {"reason": "completed"}, "value": "1"}]}
    if interval is not None:
        got[names.PUSH_INTERVAL] = {"metrics": [{"value": str(interval)}]}
    return got


class FakeHTTP:
    """gc.fetch's stand-in: ``listings`` are the successive answers to GET /api/v1/metrics
    (the last repeats); ``refuse`` maps a DELETE path to the status or exception it gets."""

    def __init__(self, *listings: list[dict[str, Any]], body: bytes | None = None) -> None:
        self.listings = list(listings)
        self.body = body
        self.refuse: dict[str, int | BaseException] = {}
        self.calls: list[tuple[str, str, float, dict[str, str]]] = []
        self.after_delete: Callable[[], None] | None = None

    @property
    def deleted(self) -> list[str]:
        return [url[len(URL):] for method, url, _, _ in self.calls if method == "DELETE"]

    @property
    def reads(self) -> int:
        return sum(method == "GET" for method, _, _, _ in self.calls)

    def __call__(self, url: str, *, timeout: float, method: str = "GET",
                 headers: dict[str, str] | None = None) -> Answer:
        self.calls.append((method, url, timeout, dict(headers or {})))
        if method == "GET":
            assert url == URL + "/api/v1/metrics"
            if self.body is not None:
                return Answer(200, "OK", self.body)
            listing = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
            return Answer(200, "OK", json.dumps({"status": "success", "data": listing}).encode())
        refused = self.refuse.get(url[len(URL):])
        if isinstance(refused, BaseException):
            raise refused
        if refused is not None:
            return Answer(refused, "Refused Here", b"")
        if self.after_delete is not None:
            self.after_delete()
        for listing in self.listings:  # gone from every later answer, as a Pushgateway's
            listing[:] = [e for e in listing
                          if gc.Group(e["labels"], 0.0).path() != url[len(URL):]]
        return Answer(202, "Accepted", b"")


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeHTTP]]:
    monkeypatch.setattr(gc, "_reported", set())

    def install(*listings: list[dict[str, Any]], body: bytes | None = None) -> FakeHTTP:
        fake = FakeHTTP(*listings, body=body)
        monkeypatch.setattr(gc, "fetch", fake)
        return fake

    yield install


def path_of(**labels: str) -> str:
    return gc.Group({"job": JOB, **labels}, 0.0).path()


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    gc.add_parser(parser.add_subparsers())
    return parser.parse_args(["gc", "--pushgateway", URL, *argv])


# --- the parser, the refusals ---------------------------------------------------------------


def test_the_defaults_are_the_documented_ones() -> None:
    got = args()
    assert (got.max_age, got.ended_after, got.timeout, got.budget) == (3600.0, 120.0, 10.0, 60.0)
    assert got.job == JOB and got.dry_run is False and got.pushgateway == URL
    assert args("--dry-run").dry_run is True
    assert (gc.ENDED_AFTER, gc.MIN_MAX_AGE, gc.BUDGET) == (120.0, 60.0, 60.0)
    assert (gc.MAX_HONOURED_INTERVAL, gc.MAX_SHOWN_PATH) == (86400.0, 4096)


@pytest.mark.parametrize(("argv", "said"), [
    (("--max-age", "59.5s"), "--max-age 59.5s is below 60s"),
    (("--ended-after", "0"), "--ended-after must be above 0 s"),
    (("--ended-after", "-0.5"), "--ended-after must be above 0 s"),
    (("--timeout", "0"), "--timeout 0 is not above 0 seconds"),
    (("--timeout", "86400.5"), "--timeout 86400.5 is above 86400 seconds (a day)"),
    (("--budget", "0"), "--budget 0s is not above 0 s"),
    (("--budget", "-2"), "--budget -2s is not above 0 s"),
])
def test_each_refusal_is_said_before_any_request(
        argv: tuple[str, ...], said: str, http: Callable[..., FakeHTTP],
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([])
    assert gc.run(args(*argv), env={}) == 2
    assert capsys.readouterr().err == f"trainwatch gc: error: {said}" + _rest(said)
    assert fake.calls == []


def _rest(said: str) -> str:
    """The refusals' fixed tails, so the whole line is compared."""
    tails = {"--max-age": (": it would delete the groups of live trials between two pushes; "
                           "ended trials' groups go after --ended-after"),
             "--ended-after": ": Prometheus must scrape the final push first"}
    return tails.get(said.split()[0], "") + "\n"


@pytest.mark.parametrize("argv", [("--max-age", "60s"), ("--ended-after", "0.5s"),
                                  ("--timeout", "86400"), ("--timeout", "0.5"),
                                  ("--budget", "0.5s")])
def test_the_limits_themselves_are_accepted(argv: tuple[str, ...],
                                            http: Callable[..., FakeHTTP]) -> None:
    fake = http([])
    assert gc.run(args(*argv), env={}) == 0
    assert fake.reads == 1


# --- the HTTP calls ------------------------------------------------------------------------


def test_basic_auth_needs_both_names_and_the_url_loses_its_slash(
        http: Callable[..., FakeHTTP]) -> None:
    fake = http([])
    env = {names.ENV_USERNAME: "ann", names.ENV_PASSWORD: "s3cr:t"}
    gateway = gc.Pushgateway(URL + "/", 2.5, env)
    assert gateway.url == URL
    gateway.groups(JOB)
    token = base64.b64encode(b"ann:s3cr:t").decode()
    assert fake.calls == [("GET", URL + "/api/v1/metrics", 2.5, {"Authorization": f"Basic {token}"})]
    for half in ({names.ENV_USERNAME: "ann"}, {names.ENV_PASSWORD: "x"}):
        assert gc.Pushgateway(URL, 1, half).headers == {}


def test_groups_are_the_jobs_own_each_dated_ended_and_with_its_interval(
        http: Callable[..., FakeHTTP]) -> None:
    http([entry(1000.5, trial="a", rank="0"),
          entry(2000, ended=True, interval=15, trial="b"),
          entry(3000, job="nightly", trial="c"),
          entry(None, trial="undated"),
          entry("NaN", trial="nan")])
    gateway = gc.Pushgateway(URL, 1, {})
    found = gateway.groups(JOB)
    assert found == [gc.Group({"job": JOB, "trial": "a", "rank": "0"}, 1000.5),
                     gc.Group({"job": JOB, "trial": "b"}, 2000.0, ended=True, interval=15.0)]
    assert gateway.undated == [{"job": JOB, "trial": "undated"}, {"job": JOB, "trial": "nan"}]


def test_undated_groups_are_those_of_the_last_read_only(http: Callable[..., FakeHTTP]) -> None:
    http([entry(None, trial="x")], [entry(5.0, trial="x")])
    gateway = gc.Pushgateway(URL, 1, {})
    assert gateway.groups(JOB) == [] and len(gateway.undated) == 1
    assert len(gateway.groups(JOB)) == 1 and gateway.undated == []


@pytest.mark.parametrize(("pushed_at", "dated"), [
    (0, True), (LATEST_TIME, True), (-0.5, False), (LATEST_TIME + 1, False), ("NaN", False),
    ("Inf", False), ("-Inf", False), ("1e308", False), ("soon", False)])
def test_a_push_time_is_a_unix_time_or_none(pushed_at: float | str, dated: bool) -> None:
    group = gc._group(entry(pushed_at, trial="t"))
    assert (group is not None) is dated
    if group is not None:
        assert group.pushed_at == float(pushed_at)


@pytest.mark.parametrize("broken", [
    {"labels": {"job": JOB}, "push_time_seconds": {"metrics": []}},
    {"labels": {"job": JOB}, "push_time_seconds": {}},
    {"labels": {"job": JOB}, "push_time_seconds": {"metrics": [{"value": None}]}},
    {"labels": {"job": JOB}, "push_time_seconds": {"metrics": [{"value": 10**400}]}},
    {"labels": {"job": JOB}, "push_time_seconds": "1"},
    {"labels": ["job"], "push_time_seconds": {"metrics": [{"value": "1"}]}},
])
def test_a_group_that_cannot_be_dated_is_none(broken: dict[str, Any]) -> None:
    assert gc._group(broken) is None


@pytest.mark.parametrize(("value", "honoured"), [
    (86400, 86400.0), (86400.5, 86400.0), (86399.5, 86399.5), (0.5, 0.5), ("x", None),
    (10**400, None)])
def test_an_interval_is_kept_to_a_day(value: Any, honoured: float | None) -> None:
    got = entry(1.0, interval=None)
    got[names.PUSH_INTERVAL] = {"metrics": [{"value": value}]}
    assert gc._interval(got) == honoured
    assert gc._interval(entry(1.0)) is None
    assert gc._interval({names.PUSH_INTERVAL: {"metrics": []}}) is None
    assert gc._interval({names.PUSH_INTERVAL: []}) is None


@pytest.mark.parametrize("body", [b"not json", b'{"data": 5}', b'{"status": "success"}',
                                  b'{"data": [{"labels": {"job": 5}}]}',
                                  b'{"data": [{"labels": []}]}', b'{"data": ["x"]}', b"[1]"])
def test_what_is_no_pushgateways_answer_is_said_so(body: bytes,
                                                   http: Callable[..., FakeHTTP]) -> None:
    http(body=body)
    with pytest.raises(gc.GcError) as err:
        gc.Pushgateway(URL, 1, {}).groups(JOB)
    assert str(err.value) == (f"{URL}/api/v1/metrics: not a Pushgateway's answer (a list of "
                              "groups, each with its labels)")
    assert not isinstance(err.value, gc.Unreachable)


def test_json_nested_past_the_parser_is_said_so(http: Callable[..., FakeHTTP]) -> None:
    http(body=b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(gc.GcError, match="nested deeper than Python's parser goes"):
        gc.Pushgateway(URL, 1, {}).groups(JOB)


def test_an_empty_list_is_an_answer(http: Callable[..., FakeHTTP]) -> None:
    http(body=b'{"data": []}')
    assert gc.Pushgateway(URL, 1, {}).groups(JOB) == []


@pytest.mark.parametrize(("raised", "unreachable", "said"), [
    (ResponseTooLarge("over 128 MiB"), False, f"GET {URL}/api/v1/metrics: over 128 MiB"),
    (TimeoutError(), True, (f"GET {URL}/api/v1/metrics: no complete answer within 2.5 s "
                           "(--timeout)")),
    (ConnectionRefusedError("refused\x1b"), True,
     f"cannot reach the Pushgateway at {URL}: refused\\x1b"),
    (RemoteDisconnected("gone"), True, f"cannot reach the Pushgateway at {URL}: gone"),
])
def test_each_failure_of_a_request_is_one_kind_and_one_line(
        raised: BaseException, unreachable: bool, said: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(url: str, **_: Any) -> Answer:
        raise raised

    monkeypatch.setattr(gc, "fetch", fail)
    with pytest.raises(gc.GcError) as err:
        gc.Pushgateway(URL, 2.5, {}).groups(JOB)
    assert str(err.value) == said
    assert isinstance(err.value, gc.Unreachable) is unreachable


@pytest.mark.parametrize(("status", "fails"), [(399, False), (400, True), (500, True)])
def test_a_status_from_400_is_an_error(status: int, fails: bool,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc, "fetch", lambda url, **_: Answer(status, "Why\n", b'{"data": []}'))
    gateway = gc.Pushgateway(URL, 1, {})
    if fails:
        with pytest.raises(gc.GcError) as err:
            gateway.groups(JOB)
        assert str(err.value) == f"GET {URL}/api/v1/metrics: {status} Why\\n"
        assert not isinstance(err.value, gc.Unreachable)
    else:
        assert gateway.groups(JOB) == []


# --- a group's path, name and removal by hand -----------------------------------------------


def test_a_path_is_job_first_then_the_key_sorted_in_base64() -> None:
    group = gc.Group({"trial": "a/b", "job": "j", "experiment": "", "rank": "0"}, 1.0)
    assert group.path() == ("/metrics/job@base64/ag==/experiment@base64/="
                            "/rank@base64/MA==/trial@base64/YS9i")
    assert group.key == (("experiment", ""), ("job", "j"), ("rank", "0"), ("trial", "a/b"))
    assert base64.urlsafe_b64decode("_-8=") == "\xff\xef".encode("latin-1")
    assert gc._b64("\u07ff\u07bf"[:1]) == base64.urlsafe_b64encode("\u07ff".encode()).decode()


def test_a_group_is_described_by_its_key_without_the_job_each_value_bounded() -> None:
    group = gc.Group({"trial": "t\x1b", "job": "j", "experiment": "e" * 201}, 1.0)
    assert group.describe() == f"experiment={'e' * 200}…(201 chars),trial=t\\x1b"


def test_by_hand_is_curl_up_to_the_longest_path_then_the_wipe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plain, authed = gc.Pushgateway(URL, 1, {}), gc.Pushgateway(
        URL, 1, {names.ENV_USERNAME: "u", names.ENV_PASSWORD: "p"})
    base = len(path_of(trial=""))  # "trial@base64/=": each 3 characters add 4
    fits = gc.Group({"job": JOB, "trial": "x" * 3}, 0.0)
    monkeypatch.setattr(gc, "MAX_SHOWN_PATH", len(fits.path()))
    assert len(fits.path()) == base + 3  # "=" becomes 4 characters
    assert plain.by_hand(fits) == f"curl -X DELETE '{URL}{fits.path()}'"
    assert authed.by_hand(fits) == (f'curl -X DELETE -u "${names.ENV_USERNAME}:'
                                    f'${names.ENV_PASSWORD}" \'{URL}{fits.path()}\'')
    over = gc.Group({"job": JOB, "trial": "x" * 4}, 0.0)
    assert plain.by_hand(over) == (
        f"its URL path is {len(over.path())} characters, more than a Pushgateway reads: only "
        f"curl -X PUT '{URL}/api/v1/admin/wipe' (a Pushgateway run with "
        "--web.enable-admin-api; it deletes every group) or restarting a Pushgateway "
        "that does not persist removes it")
    assert f'-u "${names.ENV_USERNAME}:${names.ENV_PASSWORD}" \'{URL}/api/v1/admin/wipe\'' \
        in authed.by_hand(over)


# --- what a pass deletes --------------------------------------------------------------------


def sweep(fake: FakeHTTP, **kwargs: Any) -> gc.Sweep:
    return gc.sweep(gc.Pushgateway(URL, 1, {}), JOB, kwargs.pop("max_age", 100.0),
                    kwargs.pop("dry_run", False), **kwargs)


def trials(groups: list[gc.Group]) -> list[str]:
    return [g.labels["trial"] for g in groups]


def test_a_silent_group_goes_after_max_age_and_two_announced_intervals(
        http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(1000.0, trial="plain"), entry(1000.0, interval=70, trial="slow"),
                 entry(1000.0, interval=30, trial="fast")])
    assert trials(sweep(fake, now=1100.0).deleted) == []  # exactly max_age: kept
    assert trials(sweep(fake, now=1100.5).deleted) == ["plain", "fast"]
    assert trials(sweep(fake, now=1140.0).deleted) == []  # slow: exactly 2 x 70
    assert trials(sweep(fake, now=1140.5).deleted) == ["slow"]
    assert fake.deleted == [path_of(trial="plain"), path_of(trial="fast"), path_of(trial="slow")]


def test_an_ended_group_goes_after_ended_after_whatever_its_interval(
        http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(1000.0, ended=True, interval=500, trial="ended")])
    assert trials(sweep(fake, now=1030.0, ended_after=30.0).deleted) == []
    assert trials(sweep(fake, now=1030.5, ended_after=30.0).deleted) == ["ended"]
    fake = http([entry(1000.0, ended=True, trial="ended")])
    assert trials(sweep(fake, now=1099.5).deleted) == []  # no ended_after: max_age
    assert trials(sweep(fake, now=1100.5).deleted) == ["ended"]


def test_the_clock_is_the_wall_clock_without_now(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(WALL - 150, trial="old"), entry(WALL - 50, trial="young")])
    assert trials(sweep(fake).deleted) == ["old"]


def test_a_dry_run_lists_oldest_first_deletes_nothing_and_reads_once(
        http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(500.0, trial="b"), entry(300.0, trial="a"), entry(900.0, trial="young"),
                 entry(400.0, trial="c")])
    done = sweep(fake, now=1000.0, dry_run=True)
    assert trials(done.deleted) == ["a", "c", "b"]
    assert fake.deleted == [] and fake.reads == 1 and done.left == [] and done.failed == []


def test_nothing_due_is_one_read(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(950.0, trial="young")])
    assert sweep(fake, now=1000.0).deleted == [] and fake.reads == 1


def test_a_group_that_pushed_between_the_reads_is_spared(http: Callable[..., FakeHTTP]) -> None:
    first = [entry(300.0, trial="a"), entry(200.0, trial="pushed"), entry(100.0, trial="c")]
    second = [entry(300.0, trial="a"), entry(990.0, trial="pushed"), entry(100.0, trial="c"),
              entry(50.0, trial="new")]  # new: not a candidate of the first read
    fake = http(first, second)
    done = sweep(fake, now=1000.0)
    assert trials(done.deleted) == ["c", "a"] and fake.reads == 2
    assert fake.deleted == [path_of(trial="c"), path_of(trial="a")]


def test_the_second_read_dates_the_deletes(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(300.0, trial="a"), entry(200.0, trial="b")],
                [entry(100.0, trial="a"), entry(200.0, trial="b")])
    done = sweep(fake, now=1000.0)
    assert [(g.labels["trial"], g.pushed_at) for g in done.deleted] == [("a", 100.0), ("b", 200.0)]


def test_a_failed_delete_is_noted_and_the_pass_goes_on(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(100.0, trial="a"), entry(200.0, trial="b"), entry(300.0, trial="c")])
    fake.refuse[path_of(trial="b")] = 405
    done = sweep(fake, now=1000.0)
    assert trials(done.deleted) == ["a", "c"] and done.left == [] and done.lost is None
    [(group, why)] = done.failed
    assert group.labels["trial"] == "b"
    assert why == f"DELETE {URL}{path_of(trial='b')}: 405 Refused Here"


def test_no_answer_to_a_delete_stops_the_pass(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(100.0, trial="a"), entry(200.0, trial="b"), entry(300.0, trial="c")])
    fake.refuse[path_of(trial="b")] = ConnectionResetError("reset")
    done = sweep(fake, now=1000.0)
    assert trials(done.deleted) == ["a"] and trials(done.left) == ["b", "c"]
    assert done.failed == [] and done.lost == f"cannot reach the Pushgateway at {URL}: reset"
    assert fake.deleted == [path_of(trial="a"), path_of(trial="b")]


@pytest.mark.parametrize(("budget", "done_count"), [(2.0, 1), (2.5, 2), (3.0, 2), (0.5, 0),
                                                    (None, 4)])
def test_the_budget_counts_from_the_start_of_the_pass(
        budget: float | None, done_count: int, http: Callable[..., FakeHTTP]) -> None:
    """The clock is read once at the start, then before each DELETE, a second later each
    time (1, 2, 3... after the start): a budget is spent when the time since the start
    reaches it."""
    fake = http([entry(float(n), trial=f"t{n}") for n in (1, 2, 3, 4)])
    ticks = iter(range(1, 100))  # a start of 1, not 0: clock() alone is no elapsed time
    done = sweep(fake, now=1000.0, budget=budget, clock=lambda: float(next(ticks)))
    assert trials(done.deleted) == [f"t{n}" for n in range(1, done_count + 1)]
    assert trials(done.left) == [f"t{n}" for n in range(done_count + 1, 5)]


def test_collect_is_the_passes_deletes(http: Callable[..., FakeHTTP]) -> None:
    fake = http([entry(100.0, trial="a"), entry(950.0, trial="young")])
    gateway = gc.Pushgateway(URL, 1, {})
    assert trials(gc.collect(gateway, JOB, 100.0, True, now=1000.0)) == ["a"]
    assert trials(gc.collect(gateway, JOB, 40.0, False, now=1000.0, ended_after=5.0)) == \
        ["a", "young"]
    assert fake.deleted == [path_of(trial="a"), path_of(trial="young")]


# --- what the command says and its exit code -------------------------------------------------




def test_a_clean_pass_names_each_deleted_group_and_exits_0(
        http: Callable[..., FakeHTTP], capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([entry(ago(7300.4), trial="silent", rank="1"),
                 entry(ago(200.4), ended=True, trial="ended"),
                 entry(ago(30), trial="young")])
    assert gc.run(args(), env={}) == 0
    out, err = capsys.readouterr()
    assert out == ("deleted rank=1,trial=silent (silent, last push 7300 s ago)\n"
                   "deleted trial=ended (ended, last push 200 s ago)\n")
    assert err == f"2 group(s) deleted of job {JOB} on {URL}\n"
    assert len(fake.deleted) == 2


def test_a_dry_run_says_to_delete_and_deletes_nothing(
        http: Callable[..., FakeHTTP], capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([entry(ago(4000), trial="old")])
    assert gc.run(args("--dry-run", "--job", "other"), env={}) == 0
    assert capsys.readouterr() == ("", f"0 group(s) to delete of job other on {URL}\n")
    assert gc.run(args("--dry-run"), env={}) == 0
    out, err = capsys.readouterr()
    assert out.startswith("to delete trial=old (silent, last push 4000 s ago)")
    assert err == f"1 group(s) to delete of job {JOB} on {URL}\n" and fake.deleted == []


def test_failed_and_undated_groups_are_named_once_per_process_and_exit_1(
        http: Callable[..., FakeHTTP], capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([entry(ago(5000), trial="jam"), entry(None, trial="undated"),
                 entry(ago(5000), trial="ok")])
    fake.refuse[path_of(trial="jam")] = 405
    assert gc.run(args(), env={}) == 1
    out, err = capsys.readouterr()
    assert out.startswith("deleted trial=ok (silent, ") and out.count("\n") == 1
    jam, undated, summary = err.splitlines()
    assert jam == (f"trainwatch gc: cannot delete trial=jam (silent, last push 5000 s ago): "
                   f"DELETE {URL}{path_of(trial='jam')}: 405 Refused Here; left, and named once "
                   f"per process; by hand: curl -X DELETE '{URL}{path_of(trial='jam')}'")
    assert undated == ("trainwatch gc: no push time that is a Unix time (push_time_seconds) on "
                       "trial=undated: left alone, named once per process; by hand: "
                       f"curl -X DELETE '{URL}{path_of(trial='undated')}'")
    assert summary == (f"1 group(s) deleted of job {JOB} on {URL}; 1 could not be deleted; "
                       "1 without a push time left alone")
    assert gc.run(args(), env={}) == 1  # the next pass: counted, not named
    assert capsys.readouterr() == ("", (f"0 group(s) deleted of job {JOB} on {URL}; 1 could "
                                       "not be deleted; 1 without a push time left alone\n"))


def test_an_undated_group_alone_exits_1(http: Callable[..., FakeHTTP],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    http([entry(None, trial="undated")])
    assert gc.run(args(), env={}) == 1
    assert capsys.readouterr().err.endswith(
        f"0 group(s) deleted of job {JOB} on {URL}; 1 without a push time left alone\n")


def test_a_failed_delete_alone_exits_1(http: Callable[..., FakeHTTP],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([entry(ago(5000), trial="jam")])
    fake.refuse[path_of(trial="jam")] = 500
    assert gc.run(args(), env={}) == 1
    assert capsys.readouterr().err.endswith("; 1 could not be deleted\n")


def test_a_spent_budget_names_the_oldest_left_and_exits_1(
        http: Callable[..., FakeHTTP], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = http([entry(ago(9000), trial="t1"), entry(ago(8000), trial="t2"),
                 entry(ago(7000), trial="t3")])
    clock = [100.0]
    fake.after_delete = lambda: clock.__setitem__(0, 102.5)  # the first DELETE takes 2.5 s
    monkeypatch.setattr(gc, "sweep", functools.partial(gc.sweep, clock=lambda: clock[0]))
    assert gc.run(args("--budget", "2.5s"), env={}) == 1
    out, err = capsys.readouterr()
    assert out.startswith("deleted trial=t1 (silent, last push 9000 s ago)") and \
        out.count("\n") == 1
    left, summary = err.splitlines()
    assert left == ("trainwatch gc: the pass's budget (--budget 2.5s) ran out: 2 group(s) due "
                    "left for the next pass, the oldest trial=t2 (silent, last push 8000 s ago)")
    assert summary == f"1 group(s) deleted of job {JOB} on {URL}; 2 left for the next pass"


def test_a_pushgateway_gone_mid_pass_exits_2(http: Callable[..., FakeHTTP],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([entry(ago(9000), trial="t1"), entry(ago(8000), trial="t2")])
    fake.refuse[path_of(trial="t1")] = TimeoutError()
    assert gc.run(args("--timeout", "3"), env={}) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        (f"trainwatch gc: error: DELETE {URL}{path_of(trial='t1')}: no complete answer within 3 s "
        "(--timeout); the pass stopped, 2 group(s) due left for the next pass"),
        f"0 group(s) deleted of job {JOB} on {URL}; 2 left for the next pass"]


def test_an_unreadable_pushgateway_is_one_bounded_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(url: str, **_: Any) -> Answer:
        raise OSError("x" * 5000)

    monkeypatch.setattr(gc, "fetch", fail)
    assert gc.run(args(), env={}) == 2
    assert capsys.readouterr().err == (f"trainwatch gc: error: cannot reach the Pushgateway at "
                                       f"{URL}: {'x' * 200}…(5000 chars)\n")


def test_the_url_comes_from_the_environment_without_the_flag(
        http: Callable[..., FakeHTTP], capsys: pytest.CaptureFixture[str]) -> None:
    fake = http([])
    parser = argparse.ArgumentParser()
    gc.add_parser(parser.add_subparsers())
    assert gc.run(parser.parse_args(["gc"]), env={names.ENV_PUSHGATEWAY: URL + "/"}) == 0
    assert fake.calls[0][1] == URL + "/api/v1/metrics"
    assert fake.calls[0][2] == 10.0  # the default --timeout reaches each request
    assert math.isfinite(fake.calls[0][2])


def test_a_long_error_is_cut_at_2000_characters(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://pgw.test/" + "p" * 3000
    monkeypatch.setattr(gc, "fetch", lambda *_, **__: Answer(200, "OK", b"[]"))
    parser = argparse.ArgumentParser()
    gc.add_parser(parser.add_subparsers())
    assert gc.run(parser.parse_args(["gc", "--pushgateway", url]), env={}) == 2
    said = (f"{url}/api/v1/metrics: not a Pushgateway's answer (a list of groups, each with its "
            "labels)")
    assert capsys.readouterr().err == (f"trainwatch gc: error: {said[:2000]}…({len(said)} "
                                       "chars)\n")


def test_the_subcommand_is_described_by_the_first_line_of_the_docs() -> None:
    made: list[dict[str, Any]] = []

    class Commands:
        def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
            made.append({"name": name, **kwargs})
            return argparse.ArgumentParser()

    gc.add_parser(Commands())
    assert made == [{"name": "gc", "help": "retire ended and silent trial groups",
                     "description": "`trainwatch gc`: retire trial groups: ended ones once "
                                    "scraped, silent ones after ``--max-age``."}]


def test_under_a_second_of_max_age_a_group_without_an_interval_goes_after_max_age(
        http: Callable[..., FakeHTTP]) -> None:
    """What tests/test_trial_lifecycle.py does (max_age 1 s): no announced interval is no
    floor, not one of a second."""
    fake = http([entry(1000.0, trial="quiet")])
    assert trials(sweep(fake, now=1001.5, max_age=1.0, dry_run=True).deleted) == ["quiet"]
    assert trials(sweep(fake, now=1000.5, max_age=0.25, dry_run=True).deleted) == ["quiet"]
    assert trials(sweep(fake, now=1000.2, max_age=0.25, dry_run=True).deleted) == []


def test_a_group_is_immutable() -> None:
    group = gc.Group({"job": JOB}, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        group.pushed_at = 2.0  # type: ignore[misc]


def test_a_groups_age_is_now_less_its_last_push(monkeypatch: pytest.MonkeyPatch) -> None:
    """A push long ago (here 1970, at 1,000 s): its age is the difference, not the remainder
    of now by it, which equals it only for a push after half of now."""
    monkeypatch.setattr(gc.time, "time", lambda: 5000.0)
    assert gc._state(gc.Group({"job": JOB}, 1000.0)) == "silent, last push 4000 s ago"
    assert gc._state(gc.Group({"job": JOB}, 3000.0, ended=True)) == "ended, last push 2000 s ago"
