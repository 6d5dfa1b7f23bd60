"""trainwatch.promapi against a scripted loopback server (tests/loopback.py): what each call
sends (path, parameters, GET or a POSTed form), what it makes of each answer, and each way an
answer is refused, at the edges of every bound."""

from __future__ import annotations

import json
import math
import re
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.loopback import Script, scripted_server
from tests.trial_support import closed_port_url
from trainwatch import httpget
from trainwatch.cliutil import LATEST_TIME, MAX_TIMEOUT
from trainwatch.promapi import (
    ANY,
    COUNT,
    LARGEST_COUNT,
    POST_PAST,
    TIME,
    Kind,
    PrometheusAPI,
    PrometheusError,
    _number,
    _one_line,
    _strings,
    largest,
)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Script]]:
    with scripted_server() as found:
        yield found


@pytest.fixture
def api(served: tuple[str, Script]) -> PrometheusAPI:
    return PrometheusAPI(served[0] + "/", timeout=5)


@pytest.fixture
def script(served: tuple[str, Script]) -> Script:
    return served[1]


def success(data: Any) -> str:
    return json.dumps({"status": "success", "data": data})


def vector(*series: tuple[dict[str, str], list[Any]]) -> str:
    return success({"resultType": "vector",
                    "result": [{"metric": m, "value": v} for m, v in series]})


def matrix(*series: tuple[dict[str, str], list[Any]]) -> str:
    return success({"resultType": "matrix",
                    "result": [{"metric": m, "values": v} for m, v in series]})


# The constructor


def test_the_url_is_kept_without_its_trailing_slashes_and_the_timeout_as_given() -> None:
    api = PrometheusAPI("https://prom.example:9090//", timeout=7.25)
    assert (api.url, api.timeout, api.at) == ("https://prom.example:9090", 7.25, None)
    assert PrometheusAPI("http://p:1").timeout == 10.0


@pytest.mark.parametrize("url", ["ftp://p:9090", "p:9090", "http://", "http:///api", "", "//p:1"])
def test_a_url_that_is_not_http_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"--prometheus: .* is not an http\(s\) URL"):
        PrometheusAPI(url)


def test_the_timeout_is_taken_above_0_up_to_a_day_and_refused_past_either_end() -> None:
    assert PrometheusAPI("http://p:1", timeout=MAX_TIMEOUT).timeout == MAX_TIMEOUT
    assert PrometheusAPI("http://p:1", timeout=0.001).timeout == 0.001
    for bad in (0.0, -0.5, MAX_TIMEOUT + 0.5, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"--timeout must be .* at most 86400, not"):
            PrometheusAPI("http://p:1", timeout=bad)


def test_pinned_is_the_same_server_at_an_instant_and_leaves_the_original_as_it_was() -> None:
    api = PrometheusAPI("http://p:1/", timeout=3.5)
    at = api.pinned(1_700_000_123.4567)
    assert (at.url, at.timeout, at.at) == ("http://p:1", 3.5, 1_700_000_123.4567)
    assert api.at is None and at is not api
    assert api.pinned(None).at is None


# What is sent


def test_an_instant_query_is_a_get_of_query_at_prometheus_now_or_at_the_pinned_instant(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(vector())
    assert api.query('up{job="a b"}') == []
    [sent] = script.requests
    assert (sent.method, sent.path, sent.query) == ("GET", "/api/v1/query",
                                                    {"query": ['up{job="a b"}']})
    script.answer(vector())
    api.pinned(1_700_000_000.12345).query("up")
    [sent] = script.requests
    assert (sent.method, sent.path, sent.query) == ("GET", "/api/v1/query",  # an instant too
                                                    {"query": ["up"], "time": ["1700000000.123"]})


def test_a_call_with_no_parameters_has_no_query_string(api: PrometheusAPI, script: Script) -> None:
    script.answer(success({"groups": []}))
    assert api.rules() == []
    [sent] = script.requests
    assert (sent.method, sent.path, sent.query, sent.body) == ("GET", "/api/v1/rules", {}, b"")


def test_a_form_longer_than_post_past_is_posted_as_a_form_and_one_at_it_is_in_the_url(
        api: PrometheusAPI, script: Script) -> None:
    # "query=" + the expression: 4,096 characters exactly (POST_PAST), then one more.
    assert POST_PAST == 4096
    at_limit = "x" * (4096 - len("query="))
    for expr, method in ((at_limit, "GET"), (at_limit + "y", "POST")):
        script.answer(vector())
        api.query(expr)
        [sent] = script.requests
        assert (sent.method, sent.path) == (method, "/api/v1/query")
        if method == "GET":
            assert sent.query == {"query": [expr]} and sent.body == b""
            assert "content-type" not in sent.headers
        else:
            assert sent.query == {} and sent.body == f"query={expr}".encode()
            assert sent.headers["content-type"] == "application/x-www-form-urlencoded"


def test_a_range_query_sends_its_bounds_to_the_millisecond_and_its_step(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(matrix(({"a": "1"}, [[100.5, "2"], [115.5, "3.25"]])))
    found = api.query_range("rate(x[1m])", 1_700_000_000.0004, 1_700_000_900.9876, 15.5)
    assert found == [({"a": "1"}, [(100.5, 2.0), (115.5, 3.25)])]
    [sent] = script.requests
    assert sent.path == "/api/v1/query_range"
    assert sent.query == {"query": ["rate(x[1m])"], "start": ["1700000000.000"],
                          "end": ["1700000900.988"], "step": ["15.5"]}


def test_value_asks_for_the_max_and_samples_reads_a_matrix_at_the_instant(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(vector(({}, [1.5, "41.75"])))
    assert api.value("rate(x[5m])") == 41.75
    assert script.requests[0].query == {"query": ["max(rate(x[5m]))"]}
    script.answer(vector())
    assert api.value("y") is None
    script.answer(vector(({}, [1.5, "NaN"])))
    assert api.value("y") is None
    script.answer(matrix(({"r": "0"}, [[10, "1"], [20, "2"]]), ({"r": "1"}, [])))
    assert api.pinned(30.0).samples("m[5m]") == [({"r": "0"}, [(10.0, 1.0), (20.0, 2.0)]),
                                                 ({"r": "1"}, [])]
    assert script.requests[0].query == {"query": ["m[5m]"], "time": ["30.000"]}


# What is made of an answer


def test_a_vector_is_each_series_labels_and_value_as_floats(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(vector(({"a": "1", "b": "x"}, [1_700_000_000.5, "-2.5"]),
                         ({}, [0, "+Inf"]), ({"c": ""}, [LATEST_TIME, "7"])))
    [(first, one), (second, two), (third, three)] = api.query("q")
    assert (first, one, second, two, third, three) == (
        {"a": "1", "b": "x"}, -2.5, {}, math.inf, {"c": ""}, 7.0)
    assert type(first) is dict


def test_label_values_are_the_list_of_strings_and_none_is_empty(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(success(["b", "a"]))
    assert api.label_values("trial", start="5") == ["b", "a"]
    [sent] = script.requests
    assert (sent.path, sent.query) == ("/api/v1/label/trial/values", {"start": ["5"]})
    script.answer(success(None))
    assert api.label_values("trial") == []
    for bad in ({"a": "b"}, ["a", 1], "ab"):
        script.answer(success(bad))
        with pytest.raises(PrometheusError, match=r"answered /api/v1/label/trial/values with "
                           "not a list of strings"):
            api.label_values("trial")


RULE = {"name": "R", "type": "alerting", "query": "up == 0", "labels": {"s": "x"},
        "annotations": {"t": "0.5"}}


def test_rules_are_flattened_out_of_their_groups_in_order(
        api: PrometheusAPI, script: Script) -> None:
    second = {"name": "S", "type": "recording"}
    script.answer(success({"groups": [{"rules": [RULE, second]}, {"rules": []},
                                      {"rules": [{**RULE, "name": "T", "labels": None}]}]}))
    assert api.rules() == [RULE, second, {**RULE, "name": "T", "labels": None}]


@pytest.mark.parametrize("data, why", [
    (None, "no list of rule groups"), ({"groups": {}}, "no list of rule groups"),
    ([], "no list of rule groups"),
    ({"groups": [{"rules": [RULE]}, {"name": "g"}]}, "a rule group without its list"),
    ({"groups": ["g"]}, "a rule group without its list"),
    ({"groups": [{"rules": ["R"]}]}, "a rule without its name"),
    ({"groups": [{"rules": [{**RULE, "name": 1}]}]}, "a rule without its name"),
    ({"groups": [{"rules": [{**RULE, "type": None}]}]}, "a rule without its name"),
    ({"groups": [{"rules": [{**RULE, "query": ["up"]}]}]}, "a rule without its name"),
    ({"groups": [{"rules": [{**RULE, "labels": {"s": 1}}]}]}, "a rule without its name"),
    ({"groups": [{"rules": [{**RULE, "annotations": {"t": 0.5}}]}]}, "a rule without its name"),
])
def test_rules_not_as_prometheus_writes_them_are_refused_naming_what(
        api: PrometheusAPI, script: Script, data: Any, why: str) -> None:
    script.answer(success(data))
    with pytest.raises(PrometheusError, match=f"Prometheus at {api.url} answered "
                       f"/api/v1/rules with {why}"):
        api.rules()


ALERT = {"state": "firing", "value": "1e+00", "labels": {"alertname": "A"},
         "annotations": {"summary": "s"}}


def test_alerts_are_the_list_as_it_came(api: PrometheusAPI, script: Script) -> None:
    script.answer(success({"alerts": [ALERT, {}]}))
    assert api.alerts() == [ALERT, {}]
    assert script.requests[0].path == "/api/v1/alerts"
    script.answer(success({"alerts": []}))
    assert api.alerts() == []


@pytest.mark.parametrize("data, why", [
    (None, "no list of alerts"), ({"alerts": {"A": "firing"}}, "no list of alerts"),
    ({"alerts": [ALERT, "A"]}, "an alert without its labels or state"),
    ({"alerts": [{**ALERT, "state": 1}]}, "an alert without its labels or state"),
    ({"alerts": [{**ALERT, "value": 1.0}]}, "an alert without its labels or state"),
    ({"alerts": [{**ALERT, "labels": {"a": 1}}]}, "an alert without its labels or state"),
    ({"alerts": [{**ALERT, "annotations": ["s"]}]}, "an alert without its labels or state"),
])
def test_alerts_not_as_prometheus_writes_them_are_refused_naming_what(
        api: PrometheusAPI, script: Script, data: Any, why: str) -> None:
    script.answer(success(data))
    with pytest.raises(PrometheusError, match=f"answered /api/v1/alerts with {why}"):
        api.alerts()


# Each way an answer is refused


@pytest.mark.parametrize("data, why", [
    ({"resultType": "vector"}, r'no list of series \("result"\)'),
    ([], r'no list of series \("result"\)'),
    ({"result": {"metric": {}}}, r'no list of series \("result"\)'),
    ({"result": ["up"]}, r'a series without its labels \("metric", strings\)'),
    ({"result": [{"value": [1, "1"]}]}, "a series without its labels"),
    ({"result": [{"metric": {"a": 1}, "value": [1, "1"]}]}, "a series without its labels"),
    ({"result": [{"metric": {}}]}, r"a sample that is not a \[time, value\] pair \(None\)"),
    ({"result": [{"metric": {}, "value": [1, "1", 2]}]}, r"a sample that is not a \[time, value\] pair"),
    ({"result": [{"metric": {}, "value": [1]}]}, r"a sample that is not a \[time, value\] pair"),
    ({"result": [{"metric": {}, "value": {"1": "1"}}]}, r"a sample that is not a \[time, value\] pair"),
    ({"result": [{"metric": {}, "value": [-0.5, "1"]}]}, "sample time -0.5, not a Unix time"),
    ({"result": [{"metric": {}, "value": [LATEST_TIME + 1, "1"]}]}, "sample time 4102444801"),
    ({"result": [{"metric": {}, "value": ["NaN", "1"]}]}, "sample time 'NaN'"),
    ({"result": [{"metric": {}, "value": [None, "1"]}]}, "sample time None"),
    ({"result": [{"metric": {}, "value": [1, "one"]}]}, "sample value 'one', not a number"),
    ({"result": [{"metric": {}, "value": [1, True]}]}, "sample value True, not a number"),
])
def test_a_vector_not_as_prometheus_writes_it_is_refused_naming_the_query(
        api: PrometheusAPI, script: Script, data: Any, why: str) -> None:
    script.answer(success(data))
    with pytest.raises(PrometheusError, match=f"^Prometheus at {api.url} answered "
                       f"rate\\(x\\[5m\\]\\) by \\(job\\) with {why}"):
        api.query("rate(x[5m])\n  by (job)")


def test_a_matrix_series_without_its_values_list_is_refused(
        api: PrometheusAPI, script: Script) -> None:
    for series in ({"metric": {}}, {"metric": {}, "values": {"1": "2"}}):
        script.answer(success({"result": [series]}))
        with pytest.raises(PrometheusError, match=r'without its samples \("values"\)'):
            api.samples("m[5m]")
    script.answer(success({"result": [{"metric": {}, "values": [[1, "2"], [2]]}]}))
    with pytest.raises(PrometheusError, match=r"not a \[time, value\] pair \(\[2\]\)"):
        api.samples("m[5m]")
    script.answer(success({"result": [{"metric": {"a": 2}, "values": []}]}))
    with pytest.raises(PrometheusError, match="a series without its labels"):
        api.samples("m[5m]")


@pytest.mark.parametrize("kind, good, bad, must", [
    (COUNT, ("0", "17", str(LARGEST_COUNT), 2**53), ("-1", "-0.001", str(2**53 + 2), "NaN",
                                                     "+Inf", "-Inf"), "a count"),
    (TIME, ("0", "1700000000.25", str(LATEST_TIME)), ("-1", "-0.001", str(LATEST_TIME + 0.01),
                                                      "NaN", "+Inf"), "a Unix time"),
])
def test_a_count_or_a_time_is_taken_finite_and_in_range_and_refused_past_either_end(
        api: PrometheusAPI, script: Script, kind: str, good: tuple[Any, ...],
        bad: tuple[Any, ...], must: str) -> None:
    for value in good:
        script.answer(vector(({}, [5, value])))
        assert api.query("q", kind) == [({}, float(value))]  # type: ignore[arg-type]
        script.answer(matrix(({}, [[5, value]])))
        assert api.samples("q[1m]", kind) == [({}, [(5.0, float(value))])]  # type: ignore[arg-type]
    for value in bad:
        script.answer(vector(({}, [5, value])))
        with pytest.raises(PrometheusError, match=f"answered q with '?{re.escape(str(value))}'? where {must}"):
            api.query("q", kind)  # type: ignore[arg-type]
        script.answer(matrix(({}, [[5, "1"], [6, value]])))
        with pytest.raises(PrometheusError, match=f"where {must}"):
            api.query_range("q", 1, 2, 1, kind)  # type: ignore[arg-type]


def test_any_value_passes_as_it_is_negative_huge_or_not_finite(
        api: PrometheusAPI, script: Script) -> None:
    for value in ("-1e300", "1e308", str(LATEST_TIME * 2), "-Inf", "+Inf"):
        script.answer(vector(({}, [5, value])))
        assert api.query("q", ANY) == [({}, float(value))]
        assert api.query("q") == [({}, float(value))]
    script.answer(vector(({}, [5, "NaN"])))
    [(_, nan)] = api.query("q")
    assert math.isnan(nan)


def test_an_error_answer_is_the_servers_own_words_on_one_line(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(json.dumps({"status": "error", "errorType": "bad_data",
                              "error": "parse error:\n  unexpected \x1b[2J"}), status=400)
    with pytest.raises(PrometheusError) as caught:
        api.query("q(")
    assert str(caught.value) == (f"Prometheus at {api.url}: query failed: parse error: "
                                 "unexpected \\x1b[2J")


@pytest.mark.parametrize("doc, shown", [
    ({"status": "error"}, "{'status': 'error'}"),
    ({"status": "error", "error": 5}, "{'error': 5, 'status': 'error'}"),
    ({"data": {"result": [1]}}, "{'data': {'result': [...]}}"),
    (["success"], "['success']"),
    ("success", "'success'"),
])
def test_an_answer_without_status_success_is_refused_showing_it(
        api: PrometheusAPI, script: Script, doc: Any, shown: str) -> None:
    script.answer(json.dumps(doc))
    with pytest.raises(PrometheusError) as caught:
        api.get("alerts")
    assert str(caught.value) == (f"Prometheus at {api.url}: alerts failed: its answer has no "
                                 f"status \"success\" ({shown})")


def test_an_answer_that_is_no_json_or_too_deep_is_refused_naming_the_path_not_the_query(
        api: PrometheusAPI, script: Script) -> None:
    script.answer("<html>502</html>", status=502)
    with pytest.raises(PrometheusError) as caught:
        api.query("secret_query")
    assert str(caught.value) == (f"{api.url}/api/v1/query did not answer with Prometheus API "
                                 f"JSON (is {api.url} a Prometheus server?)")
    script.answer("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PrometheusError) as caught:
        api.query("secret_query")
    assert str(caught.value).startswith(f"{api.url}/api/v1/query answered JSON nested deeper "
                                        "than Python's parser goes")
    assert str(caught.value).endswith(f"is {api.url} a Prometheus server?")


def test_a_server_that_cannot_be_reached_is_one_error_naming_it() -> None:
    url = closed_port_url()
    with pytest.raises(PrometheusError, match=f"^cannot reach Prometheus at {url}: .*refused"):
        PrometheusAPI(url, timeout=2).query("up")


def test_an_answer_past_the_size_limit_is_the_limits_own_message(
        api: PrometheusAPI, script: Script, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpget, "MAX_RESPONSE_BYTES", 100)
    script.answer(vector(({"a": "x" * 200}, [1, "1"])))
    with pytest.raises(PrometheusError) as caught:
        api.query("up")
    assert str(caught.value) == (f"{api.url}/api/v1/query answered more than 100 bytes "
                                 "(MAX_RESPONSE_BYTES, the limit on one answer)")


# The helpers


def test_largest_is_the_first_value_that_is_a_number() -> None:
    assert largest([]) is None
    assert largest([({}, math.nan)]) is None
    assert largest([({}, math.nan), ({"a": "1"}, 2.5), ({}, 9.0)]) == 2.5
    assert largest([({}, -3.0)]) == -3.0


def test_strings_is_a_dict_of_strings_to_strings_only() -> None:
    assert _strings({}) and _strings({"a": "b", "c": ""})
    for bad in (None, [], [("a", "b")], {"a": 1}, {1: "a"}, {"a": "b", "c": None}, "ab"):
        assert not _strings(bad)


def test_number_reads_what_prometheus_writes_and_nothing_else() -> None:
    assert [_number(v) for v in ("1.5", "-2", 3, 4.25, "+Inf", "1e3")] == [
        1.5, -2.0, 3.0, 4.25, math.inf, 1000.0]
    assert math.isnan(_number("NaN"))  # type: ignore[arg-type]
    for bad in (True, False, None, [1], {"a": 1}, "one", "", 10**400, b"1"):
        assert _number(bad) is None


@given(st.floats(allow_nan=False))
def test_number_reads_a_floats_repr_back_to_it(value: float) -> None:
    assert _number(repr(value)) == value and _number(value) == value


def test_one_line_joins_whitespace_writes_escapes_out_and_cuts_at_120() -> None:
    assert _one_line("  a\tb\n\n c  ") == "a b c"
    assert _one_line("a\x1b[2J\x07") == "a\\x1b[2J\\x07"
    assert _one_line("x" * 120) == "x" * 120
    assert _one_line("x" * 121) == "x" * 119 + "…"
    assert len(_one_line("y" * 5000)) == 120
    # Only the first 480 characters are read: spaces past them never count.
    assert _one_line("z" * 480 + " " * 50 + "tail") == "z" * 119 + "…"
    assert _one_line(" " * 479 + "a" + "b" * 100) == "a"


@given(st.text(max_size=300))
def test_one_line_is_one_printable_line_of_at_most_120(text: str) -> None:
    line = _one_line(text)
    assert len(line) <= 120 and line.isprintable() and line == line.strip()
    assert "  " not in line


def test_a_long_string_in_an_answer_is_quoted_cut_to_40_characters(
        api: PrometheusAPI, script: Script) -> None:
    script.answer(success({"alerts": [{"labels": {"a": 1}, "state": "y" * 60}]}))
    with pytest.raises(PrometheusError) as caught:
        api.alerts()
    assert str(caught.value).endswith(
        "an alert without its labels or state ({'labels': {'a': 1}, "
        "'state': 'yyyyyyyyyyyyyyyyy...yyyyyyyyyyyyyyyyyy'})")


def test_each_kind_the_type_allows_is_checked_as_its_name_says(api: PrometheusAPI,
                                                                script: Script) -> None:
    """Kind's values as a caller may spell them: "any" takes every float, "count" a whole
    number 0 to 2**53, "time" a Unix time 1970 to 2100 (5e9 s is past 2100, under 2**53)."""
    def takes(kind: Any, value: str) -> bool:
        script.answer(vector(({}, [1.0, value])))
        try:
            api.query("x", kind)
        except PrometheusError:
            return False
        return True

    found = {kind: tuple(takes(kind, v) for v in ("-1", "5e9", "NaN", "7"))
             for kind in typing.get_args(Kind)}
    assert found == {"any": (True, True, True, True), "count": (False, True, False, True),
                     "time": (False, False, False, True)}
