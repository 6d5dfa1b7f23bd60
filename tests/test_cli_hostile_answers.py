"""Every CLI command against a hostile or broken Prometheus or Pushgateway (issue 37): sample
values that are not finite or not plausible where a count or a time is needed, results without
their fields, an answer nested 100,000 deep, an answer that is no JSON. Each is one line on
stderr naming the server and what was wrong, exit 2: never a traceback, never a wrong answer
with exit 0. And every numeric flag refuses non-finite and out-of-range values in one line.

The server is one in-process ``http.server`` on loopback for the whole module; each case sets
what it answers (:class:`Hostile`). It is a plausible Prometheus otherwise: it serves the
shipped rules, and every query a trial ``e/<trial>`` rank 0 (the trial echoed from the query's
own matchers), so each command gets as far as the figure that is wrong.
"""

from __future__ import annotations

import http.server
import json
import math
import re
import threading
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trial_support import closed_port_url
from trainwatch import cli, gc, httpget
from trainwatch.cliutil import LATEST_TIME
from trainwatch.diagnose.render import BAR_WIDTH
from trainwatch.diagnose.rulesource import shipped_rules
from trainwatch.promapi import COUNT, TIME, PrometheusAPI, PrometheusError
from trial_instrumentation import names

DEEP = 100_000  # levels of nesting: 200 KB of brackets


class Hostile:
    """What the server answers now: ``mode`` is "ok", ``value:X`` (every figure but the times
    is X), ``figure:X`` (every figure but the times and the step and sample counts), ``time:X``
    (the times are X: a run's first and last sample, start and last push), ``trace-end:X``
    (only a profiler trace's end time is X), ``stamp:X`` (every sample's time stamp is X) or
    one of BROKEN. ``deletes`` counts the DELETEs it was sent (gc's)."""

    mode = "ok"
    deletes = 0


# Sample values a Prometheus writes as strings, where a count or a time is needed.
VALUES = ("+Inf", "-Inf", "1e308", "NaN")
# Answers broken in their shape or encoding.
BROKEN = ("no-value", "deep", "nested-900", "not-json", "value-not-a-number",
          "labels-not-strings", "no-rules", "threshold-NaN", "alerts-not-a-list",
          "error-on-two-lines")
# The queries whose values are times (or the age since one): runs.find_runs's, the push age and
# a profiler trace's end.
_TIMES = ("timestamp(", names.START_TIME, "push_time_seconds", names.PROFILE_END_TIME)
# The counters read as whole numbers.
_COUNTS = (f"{names.STEPS}_total", f"{names.SAMPLES}_total")
# A range selector's query (``m{...}[5m]``, ``... offset 1m``) answers a matrix.
_RANGE = re.compile(r"\](\s*offset\s+-?[0-9a-z.]+)?\s*$")


def _labels(query: str) -> dict[str, object]:
    wanted = dict(re.findall(r'\b(experiment|trial|rank)="([^"]*)"', query))
    if Hostile.mode == "labels-not-strings":
        return {"experiment": "e", "trial": ["a"], "rank": 0}
    return {"__name__": "trainwatch_trial_info", "job": "trainwatch", "instance": "pgw:9091",
            "experiment": wanted.get("experiment", "e"), "trial": wanted.get("trial", "a"),
            "rank": wanted.get("rank", "0"), "pid": "4242", "nodename": "node-1",
            "world_size": "1", "phase": "forward", "uuid": "GPU-1", "le": "+Inf"}


def _answer(path: str, params: dict[str, str]) -> bytes:
    mode = Hostile.mode
    if mode == "deep":
        return b"[" * DEEP + b"]" * DEEP
    if mode == "nested-900":  # within reach of Python's parser, or just past it
        return b'{"status": "success", "data": {"storageRetention": ' + b"[" * 900 + \
            b"]" * 900 + b', "groups": ' + b"[" * 900 + b"]" * 900 + b"}}"
    if mode == "not-json":
        return b"<html><body>502 Bad Gateway</body></html>"
    if mode == "error-on-two-lines":
        return json.dumps({"status": "error", "errorType": "bad_data",
                           "error": "parse error\nVERDICT: healthy\x1b[2J"}).encode()
    now, query = time.time(), params.get("query", "")
    what, _, hostile = mode.partition(":")
    stamp = now - 1 if what != "stamp" else float(hostile)
    sample: object = "1"
    if any(name in query for name in _TIMES):
        sample = "5" if query.startswith("time() -") else f"{now - 60:.3f}"
        if what == "time" or (what == "trace-end" and names.PROFILE_END_TIME in query):
            sample = hostile
    elif any(name in query for name in _COUNTS):
        sample = hostile if what == "value" else "100"
    elif what in ("value", "figure"):
        sample = hostile
    elif mode == "value-not-a-number":
        sample = {"not": "a number"}
    data: object
    if path.endswith("/rules"):
        rules = shipped_rules()
        if mode == "threshold-NaN":
            rules = [{**r, "annotations": {**r["annotations"], "threshold": "NaN"}} for r in rules]
        groups = ([{"name": "trainwatch"}] if mode == "no-rules" else
                  [{"name": "trainwatch", "rules": rules}])
        data = {"groups": groups}
    elif path.endswith("/alerts"):
        data = {"alerts": {"TrainwatchTrialStale": "firing"} if mode == "alerts-not-a-list"
                else []}
    elif path.endswith("/status/runtimeinfo"):
        data = {"storageRetention": "inf" if what == "figure" else "15d"}  # falls back to 15d
    elif path.endswith("/series"):
        data = [_labels(params.get("match[]", ""))]
    elif "/label/" in path:
        data = []
    elif path.endswith("/query_range") or _RANGE.search(params.get("query", "")):
        series: dict[str, object] = {"metric": _labels(params.get("query", ""))}
        if mode != "no-value":
            series["values"] = [[stamp - 30, sample], [stamp, sample]]
        data = {"resultType": "matrix", "result": [series]}
    else:
        series = {"metric": _labels(params.get("query", ""))}
        if mode != "no-value":
            series["value"] = [stamp, sample]
        data = {"resultType": "vector", "result": [series]}
    return json.dumps({"status": "success", "data": data}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(parts.query))
        if self.command == "DELETE":
            Hostile.deletes += 1
        if parts.path.startswith("/api/v1/metrics") and Hostile.mode not in (
                "deep", "nested-900", "not-json"):
            body = _gateway()
        else:
            body = _answer(parts.path, params)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_GET

    def log_message(self, *args: object) -> None:
        pass


def _gateway() -> bytes:
    """A Pushgateway's /api/v1/metrics: one trial group, its push time as the mode says."""
    what, _, hostile = Hostile.mode.partition(":")
    labels: dict[str, object] = {"job": names.JOB, "experiment": "e", "trial": "a", "rank": "0"}
    pushed: object = hostile if what in ("value", "time") else "1.7e9"
    if Hostile.mode == "value-not-a-number":
        pushed = {"not": "a number"}
    elif Hostile.mode == "labels-not-strings":
        labels["trial"] = ["a"]
    group: dict[str, object] = {"labels": labels}
    if Hostile.mode != "no-value":
        group["push_time_seconds"] = {"metrics": [{"value": pushed}]}
    return json.dumps({"status": "success", "data": [group]}).encode()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile server's base URL, for the whole module."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        Hostile.mode = "ok"
        httpd.shutdown()
        httpd.server_close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[object, str, str]:
    """`trainwatch ARGV` in process: its exit code (an argparse error's too), stdout, stderr."""
    try:
        code: object = cli.main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def argv(command: str, url: str, out: Path) -> list[str]:
    return {"trials": ["trials", "--prometheus", url],
            "diagnose": ["diagnose", "--prometheus", url, "--experiment", "e"],
            "compare": ["compare", "--prometheus", url, "e/a", "e/b"],
            "report": ["report", "--prometheus", url, "--experiment", "e", "-o", str(out)],
            "gc": ["gc", "--pushgateway", url]}[command]


def assert_one_line_error(command: str, url: str, code: object, out: str, err: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == "", (out, err)
    assert err.count("\n") == 1 and err.startswith(f"trainwatch {command}: error: "), err
    assert url in err, err


COMMANDS = ("trials", "diagnose", "compare", "report")
HOSTILE = (*(f"{what}:{v}" for what in ("value", "time", "stamp") for v in VALUES),
           *(mode for mode in BROKEN if mode != "alerts-not-a-list"))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("mode", HOSTILE)
def test_a_hostile_prometheus_is_one_line_naming_it_and_exit_2(
        server: str, mode: str, command: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode = mode
    out = tmp_path / "r.html"
    code, stdout, err = run(capsys, *argv(command, server, out))
    assert_one_line_error(command, server, code, stdout, err)
    assert not out.exists()
    # What was wrong is said: the value as the server wrote it, where a count or a time was due.
    what, _, value = mode.partition(":")
    if what in ("value", "time"):
        assert f"'{value}' where a {'count' if what == 'value' else 'Unix time'} " in err, err
    elif what == "stamp":
        assert f"sample time {float(value)!r}, not a Unix time" in err, err


@pytest.mark.parametrize("command", ("diagnose", "report"))
def test_alerts_that_are_no_list_are_one_line(
        server: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode = "alerts-not-a-list"  # only diagnose and report read the alerts
    code, out, err = run(capsys, *argv(command, server, tmp_path / "r.html"))
    assert_one_line_error(command, server, code, out, err)
    assert "/api/v1/alerts" in err


@pytest.mark.parametrize("command", ("diagnose", "report"))
@pytest.mark.parametrize("value", VALUES)
def test_a_profiler_trace_that_ended_at_no_time_is_refused(
        server: str, value: str, command: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode = f"trace-end:{value}"
    code, out, err = run(capsys, *argv(command, server, tmp_path / "r.html"))
    assert_one_line_error(command, server, code, out, err)
    assert names.PROFILE_END_TIME in err and "Unix time" in err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("value", VALUES)
def test_figures_may_be_nan_or_infinite_as_prometheus_answers_them(
        server: str, value: str, command: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Shares, rates and ratios are Prometheus's to make NaN (0/0) or +Inf (x/0): they are
    said as they are, never a traceback (and a retention of "inf" is taken as the default)."""
    Hostile.mode = f"figure:{value}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # matplotlib, drawing +Inf
        code, out, err = run(capsys, *argv(command, server, tmp_path / "r.html"))
    assert code == {"diagnose": 1}.get(command, 0), err
    assert "Traceback" not in err and "error" not in err, err
    if command == "diagnose":
        # A share that is NaN (the figures NaN, or inf/inf) is said as nan%, drawn as no bar:
        # not the full bar of a phase that takes the whole step (1e308/1e308 is 100%, full).
        [phase] = [line for line in out.splitlines() if line.startswith("    forward ")]
        assert phase.split()[:2] == ["forward", "100.0%" if value == "1e308" else "nan%"], phase
        assert phase.endswith("█" * BAR_WIDTH if value == "1e308" else "nan%"), phase


def test_the_servers_own_error_is_one_line_with_its_escapes_written_out(
        server: str, capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode = "error-on-two-lines"
    code, out, err = run(capsys, *argv("trials", server, Path("unused")))
    assert_one_line_error("trials", server, code, out, err)
    assert "parse error VERDICT: healthy\\x1b[2J" in err and "\x1b" not in err


@pytest.mark.parametrize("mode", ("labels-not-strings", "deep", "nested-900", "not-json"))
def test_a_hostile_pushgateway_is_one_line_naming_it_and_nothing_is_deleted(
        server: str, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode, Hostile.deletes = mode, 0
    code, out, err = run(capsys, *argv("gc", server, Path("unused")))
    assert_one_line_error("gc", server, code, out, err)
    assert Hostile.deletes == 0


@pytest.mark.parametrize("mode", (*(f"value:{v}" for v in VALUES), "no-value",
                                  "value-not-a-number"))
def test_a_group_without_a_push_time_is_skipped_and_reported_never_deleted(
        server: str, mode: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One undatable group no longer fails the pass (exit 2 every pass until removed by
    hand): it is left alone, named once per process with how to remove it, and the pass says
    it left something (exit 1)."""
    monkeypatch.setattr(gc, "_reported", set())
    Hostile.mode, Hostile.deletes = mode, 0
    code, out, err = run(capsys, *argv("gc", server, Path("unused")))
    assert (code, out, Hostile.deletes) == (1, "", 0), err
    named, summary = err.splitlines()
    assert named.startswith("trainwatch gc: no push time that is a Unix time") and \
        "experiment=e,rank=0,trial=a" in named and "curl -X DELETE '" + server in named
    assert summary == (f"0 group(s) deleted of job {names.JOB} on {server}; 1 without a push "
                       "time left alone")
    code, out, err = run(capsys, *argv("gc", server, Path("unused")))  # named once only
    assert (code, out, err.splitlines()) == (1, "", [summary])


def test_gc_still_deletes_a_group_with_a_push_time(
        server: str, capsys: pytest.CaptureFixture[str]) -> None:
    Hostile.mode, Hostile.deletes = "ok", 0
    code, out, err = run(capsys, *argv("gc", server, Path("unused")))
    assert code == 0 and out.startswith("deleted ") and Hostile.deletes == 1, (out, err)
    # The other side of --max-age (1h): a group pushed a minute ago is kept.
    Hostile.mode, Hostile.deletes = f"time:{time.time() - 60:.3f}", 0
    code, out, err = run(capsys, *argv("gc", server, Path("unused")))
    assert (code, Hostile.deletes) == (0, 0) and "deleted" not in out, (out, err)
    Hostile.mode = "ok"


@pytest.mark.parametrize(("args", "flag"), [
    (("gc", "--timeout=inf"), "--timeout"), (("gc", "--timeout=1e308"), "--timeout"),
    (("gc", "--timeout=1e9"), "--timeout"), (("gc", "--max-age=nan"), "--max-age"),
    (("gc", "--max-age=inf"), "--max-age"), (("gc", "--ended-after=nan"), "--ended-after"),
    (("diagnose", "--timeout", "1e308"), "--timeout"),
    (("diagnose", "--timeout", "nan"), "--timeout"), (("diagnose", "--timeout", "0"), "--timeout"),
    (("diagnose", "--since", "nan"), "--since"), (("diagnose", "--since", "-5"), "--since"),
    (("diagnose", "--window", "inf"), "--window"), (("diagnose", "--at", "nan"), "--at"),
    (("diagnose", "--at", "1e308"), "--at"), (("diagnose", "--at", "9999-01-01"), "--at"),
    (("trials", "--since", "1e308"), "--since"), (("compare", "--since", "inf"), "--since"),
    (("report", "--start", "inf"), "--start"), (("report", "--end", "-1"), "--end"),
    (("report", "--timeout", "inf"), "--timeout"),
    (("profile", "--timeout", "inf"), "--timeout"),
])
def test_a_numeric_flag_refuses_what_is_not_finite_or_in_range(
        args: tuple[str, ...], flag: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = closed_port_url()  # never asked: the flag is refused first
    command, *rest = args
    given = {"gc": ["--pushgateway", url],
             "diagnose": ["--prometheus", url, "--experiment", "e"],
             "trials": ["--prometheus", url], "compare": ["--prometheus", url, "e/a", "e/b"],
             "report": ["--prometheus", url, "--experiment", "e", "-o",
                        str(tmp_path / "r.html")],
             "profile": ["--prometheus", url, "--experiment", "e", "--trial", "t"]}[command]
    code, out, err = run(capsys, command, *given, *rest)
    last = err.splitlines()[-1]
    assert code == 2 and out == "" and "Traceback" not in err, (code, err)
    assert last.startswith(f"trainwatch {command}: error: ") and flag in last, err
    assert "cannot reach" not in err


def test_a_timeout_the_request_cannot_wait_is_refused_by_the_library_too() -> None:
    with pytest.raises(ValueError, match="--timeout must be a number of seconds > 0"):
        PrometheusAPI("http://127.0.0.1:9", timeout=1e308)
    with pytest.raises(ValueError, match="timeout must be > 0 seconds and at most"):
        httpget.fetch("http://127.0.0.1:9/", timeout=1e308)


def test_nan_and_inf_figures_pass_but_counts_and_times_must_be_finite(server: str) -> None:
    """At the boundary: a figure is any float, a COUNT or a TIME is finite and in range."""
    api = PrometheusAPI(server, timeout=5)
    for value, shown in (("NaN", math.isnan), ("+Inf", math.isinf)):
        Hostile.mode = f"figure:{value}"
        [(_, found)] = api.query("sum(rate(x[5m])) / sum(rate(y[5m]))")
        assert shown(found)
        Hostile.mode = f"value:{value}"
        with pytest.raises(PrometheusError, match=f"'{re.escape(value)}' where a count"):
            api.query(f"{names.STEPS}_total", COUNT)
        Hostile.mode = f"time:{value}"
        with pytest.raises(PrometheusError, match=f"'{re.escape(value)}' where a Unix time"):
            api.query(f"{names.START_TIME}", TIME)
    Hostile.mode = "ok"


def test_a_count_and_a_time_are_taken_up_to_their_limits_and_refused_past_them(
        server: str) -> None:
    """Both sides of each range: a count 0 (a trial before its first step) to 2**53 (past it a
    float skips whole numbers), a time 0 to the last second of 2099."""
    api = PrometheusAPI(server, timeout=5)
    count, start = (f"{names.STEPS}_total", COUNT), (names.START_TIME, TIME)
    cases = {("value", count): (("0", "9007199254740992"), ("-1", "9007199254740994")),
             ("time", start): (("0", f"{LATEST_TIME:.0f}"), ("-1", f"{LATEST_TIME + 1:.0f}"))}
    try:
        for (what, (query, kind)), (taken, refused) in cases.items():
            for value in taken:
                Hostile.mode = f"{what}:{value}"
                assert [v for _, v in api.query(query, kind)] == [float(value)], value
            for value in refused:
                Hostile.mode = f"{what}:{value}"
                with pytest.raises(PrometheusError, match=f"'{value}' where a"):
                    api.query(query, kind)
    finally:
        Hostile.mode = "ok"
