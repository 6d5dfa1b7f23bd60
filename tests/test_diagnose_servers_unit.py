"""trainwatch.diagnose.servers with fake Prometheus clients: which shard holds a trial, what
each is asked (the trial's info series in a window ending now), and the one error naming
every server passed over and why."""

from __future__ import annotations

from typing import Any

import pytest

from trainwatch.diagnose import servers
from trainwatch.diagnose.servers import LOOKBACK_SECONDS, NotOnAnyServer, holding, holds
from trainwatch.promapi import PrometheusAPI, PrometheusError

NOW = 1_700_000_000.125


class Fake:
    """A server that answers /api/v1/series with ``found``, or raises ``error``."""

    def __init__(self, url: str, found: list[dict[str, str]] | None = None,
                 error: str | None = None) -> None:
        self.url, self.found, self.error = url, found or [], error
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str, **params: Any) -> Any:
        self.asked.append((path, params))
        if self.error:
            raise PrometheusError(self.error)
        return self.found


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers.time, "time", lambda: NOW)


def test_holds_asks_for_the_trials_info_series_over_the_lookback() -> None:
    api = Fake("http://a", [{"__name__": "trainwatch_trial_info"}])
    assert holds(api, "exp", "t/1", None)  # type: ignore[arg-type]
    assert api.asked == [("series", {
        "match[]": 'trainwatch_trial_info{experiment="exp", trial="t/1"}',
        "start": "1668464000.125", "end": "1700000000.125"})]
    assert LOOKBACK_SECONDS == 365 * 86400


def test_holds_since_reads_that_far_back_and_an_experiment_alone() -> None:
    api = Fake("http://a")
    assert not holds(api, "exp", None, 90.5)  # type: ignore[arg-type]
    assert api.asked == [("series", {"match[]": 'trainwatch_trial_info{experiment="exp"}',
                                     "start": "1699999909.625", "end": "1700000000.125"})]


def test_one_server_is_the_one_unasked() -> None:
    api = Fake("http://only", error="down")
    assert holding([api], "e", "t", None) is api  # type: ignore[list-item]
    assert api.asked == []


def test_the_first_server_holding_the_trial_is_chosen_and_later_ones_not_asked() -> None:
    empty, down = Fake("http://a"), Fake("http://b", error="cannot reach")
    first, second = Fake("http://c", [{"x": "1"}]), Fake("http://d", [{"x": "1"}])
    assert holding([empty, down, first, second], "e", "t", 60.0) is first  # type: ignore[list-item]
    assert [len(a.asked) for a in (empty, down, first, second)] == [1, 1, 1, 0]
    assert first.asked[0][1]["start"] == "1699999940.125"


def test_no_server_holding_it_names_each_and_why() -> None:
    apis = [Fake("http://a"), Fake("http://b", error="HTTP 503: overloaded")]
    with pytest.raises(NotOnAnyServer) as err:
        holding(apis, "exp", "t1", None)  # type: ignore[arg-type]
    assert str(err.value) == ("no Prometheus given holds exp/t1 (http://a: no such trial; "
                              "http://b: HTTP 503: overloaded)")
    with pytest.raises(NotOnAnyServer) as err:
        holding(apis, "exp", None, None)  # type: ignore[arg-type]
    assert str(err.value).startswith("no Prometheus given holds exp (http://a: no such trial;")
    assert isinstance(err.value, LookupError)


def test_a_real_client_is_accepted() -> None:
    api = PrometheusAPI("http://127.0.0.1:1/")
    assert holding([api], "e", None, None) is api


def test_no_server_at_all_holds_nothing() -> None:
    with pytest.raises(NotOnAnyServer) as err:
        holding([], "exp", "t1", None)
    assert str(err.value) == "no Prometheus given holds exp/t1 ()"
