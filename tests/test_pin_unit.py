"""trainwatch/diagnose/pin.py (`trainwatch baseline set|show|clear`) without a stack: the pin
read back from a canned Prometheus, and pushed or deleted through prometheus_client's own
Pushgateway client, replaced by a recorder."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import prometheus_client
import pytest

from trainwatch.contract.figures import BASELINE_PIN
from trainwatch.diagnose import baseline, pin, rulesource
from trainwatch.diagnose.figures import UnknownTrial
from trainwatch.lookup import NoPrometheus
from trainwatch.promapi import PrometheusError

QUERY_ALL = "trainwatch_baseline_pinned"


class Canned:
    def __init__(self, answers: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.answers, self.asked = answers, []

    def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
        self.asked.append(expr)
        return self.answers.get(expr, [])


PINS = [({"experiment": "b", "trial": "zeta"}, 1.0), ({"experiment": "a", "trial": "t9"}, 1.0),
        ({"experiment": "b", "trial": "alpha"}, 1.0), ({"trial": "lost"}, 1.0),
        ({"experiment": "c"}, 1.0)]


def test_each_experiments_pin_is_its_last_trial_by_name() -> None:
    api = Canned({QUERY_ALL: PINS})
    assert pin.all_pinned(api) == {  # type: ignore[arg-type]
        "a": "a/t9", "b": "b/zeta", "": "/lost", "c": "c/"}
    assert api.asked == [QUERY_ALL]


def test_one_experiments_pin_is_asked_of_it_alone() -> None:
    api = Canned({'trainwatch_baseline_pinned{experiment="b"}': PINS[:1] + PINS[2:3]})
    assert pin.pinned(api, "b") == "b/zeta"  # type: ignore[arg-type]
    assert pin.pinned(api, "a") is None  # type: ignore[arg-type]
    assert pin.all_pinned(Canned({})) == {}  # type: ignore[arg-type]


class Gateway:
    """prometheus_client's push and delete replaced: each call's arguments."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fails: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

        def push(gateway: str, **kw: Any) -> None:
            self.calls.append(("push", {"gateway": gateway, **kw}))
            if fails:
                raise ConnectionRefusedError(111, "Connection refused")

        def delete(gateway: str, **kw: Any) -> None:
            self.calls.append(("delete", {"gateway": gateway, **kw}))
            if fails:
                raise OSError("no route")

        monkeypatch.setattr(prometheus_client, "push_to_gateway", push)
        monkeypatch.setattr(prometheus_client, "delete_from_gateway", delete)


def test_set_pushes_the_pin_as_a_group_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    gw = Gateway(monkeypatch)
    pin._push("http://pg:9091", "exp", 3.5, "lr-0.1")
    [(what, kw)] = gw.calls
    assert what == "push"
    registry = kw.pop("registry")
    assert kw == {"gateway": "http://pg:9091", "job": "trainwatch_baseline",
                  "grouping_key": {"experiment": "exp"}, "timeout": 3.5}
    assert registry.get_sample_value("trainwatch_baseline_pinned", {"trial": "lr-0.1"}) == 1.0
    [family] = registry.collect()
    assert family.documentation == "The trial pinned as the experiment's baseline."
    assert len(family.samples) == 1


def test_clear_deletes_the_group_and_pushes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    gw = Gateway(monkeypatch)
    pin._push("http://pg:9091", "exp", 2.0, None)
    assert gw.calls == [("delete", {"gateway": "http://pg:9091", "job": "trainwatch_baseline",
                                    "grouping_key": {"experiment": "exp"}, "timeout": 2.0})]


@pytest.mark.parametrize("trial", ["t", None])
def test_an_unreachable_pushgateway_is_named_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, trial: str | None) -> None:
    Gateway(monkeypatch, fails=True)
    with pytest.raises(ValueError, match=r"^the Pushgateway at http://pg:1: .+") as err:
        pin._push("http://pg:1", "exp", 1.0, trial)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    pin.add_parser(parser.add_subparsers())
    return parser.parse_args(["baseline", *argv])


def test_the_command_line() -> None:
    args = parse("set", "e/t", "--pushgateway", "http://pg:9091", "--prometheus", "http://p:1")
    assert (args.action, args.target, args.pushgateway, args.prometheus, args.timeout) == (
        "set", "e/t", "http://pg:9091", "http://p:1", 10.0)
    assert parse("show", "e").pushgateway is None
    with pytest.raises(SystemExit):
        parse("unpin", "e")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """run() against a canned Prometheus (one pin: e/t2) and a recording Pushgateway."""
    state = SimpleNamespace(gw=Gateway(monkeypatch), urls=[], runs=[])
    api = Canned({'trainwatch_baseline_pinned{experiment="e"}': [
        ({"experiment": "e", "trial": "t2"}, 1.0)]})

    def make_api(url: str, timeout: float) -> Canned:
        state.urls.append((url, timeout))
        return api

    class Baselines:
        def __init__(self, given: Any, deployment: Any) -> None:
            assert given is api and deployment == "deployed"

        def trial_run(self, experiment: str, trial: str) -> SimpleNamespace:
            state.runs.append((experiment, trial))
            if trial == "gone":
                raise UnknownTrial("no trial e/gone")
            return SimpleNamespace(trial=trial)

    monkeypatch.setattr(pin, "PrometheusAPI", make_api)
    monkeypatch.setattr(pin, "prometheus_url", lambda url: url or "http://default:9090")
    monkeypatch.setattr(pin, "pushgateway_url", lambda url: url or "http://pg-default:9091")
    monkeypatch.setattr(baseline, "Baselines", Baselines)
    monkeypatch.setattr(rulesource, "deployment_of", lambda given: "deployed")
    return state


def test_set_pins_the_trials_run_and_says_so(cli: SimpleNamespace,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert pin.run(parse("set", "e/t", "--timeout", "4")) == 0
    assert cli.urls == [("http://default:9090", 4.0)] and cli.runs == [("e", "t")]
    [(what, kw)] = cli.gw.calls
    assert (what, kw["gateway"], kw["grouping_key"], kw["timeout"]) == (
        "push", "http://pg-default:9091", {"experiment": "e"}, 4.0)
    # the trial label is the trial alone (its experiment is the grouping key), so the pin
    # reads back as e/t, never e/e/t
    pushed = [(s.labels, s.value) for family in kw["registry"].collect() for s in family.samples]
    assert pushed == [({"trial": "t"}, 1.0)]
    assert pin.all_pinned(Canned({BASELINE_PIN: [({"experiment": "e", **labels}, value)  # type: ignore[arg-type]
                                                 for labels, value in pushed]})) == {"e": "e/t"}
    assert capsys.readouterr().out == ("pinned e/t as the baseline of e (Prometheus holds it "
                                       "from its next scrape of the Pushgateway)\n")


def test_set_refuses_a_rank_or_an_unknown_trial_before_any_push(
        cli: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert pin.run(parse("set", "e/t/0")) == 2
    assert capsys.readouterr().err == ("trainwatch baseline: error: 'e/t/0': a baseline is "
                                       "experiment/trial\n")
    assert pin.run(parse("set", "e")) == 2
    assert "is not a trial reference" in capsys.readouterr().err
    assert pin.run(parse("set", "e/gone")) == 2
    assert capsys.readouterr().err == "trainwatch baseline: error: no trial e/gone\n"
    assert cli.gw.calls == [] and cli.runs == [("e", "gone")]


def test_clear_deletes_the_pin_at_the_given_pushgateway(
        cli: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert pin.run(parse("clear", "e", "--pushgateway", "http://pg:1")) == 0
    assert [(w, kw["gateway"], kw["grouping_key"]) for w, kw in cli.gw.calls] == [
        ("delete", "http://pg:1", {"experiment": "e"})]
    assert capsys.readouterr().out == ("cleared: e is judged against auto (the median of the "
                                       "last runs that ended clean)\n")


def test_show_says_the_pin_or_auto_with_names_made_printable(
        cli: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    assert pin.run(parse("show", "e")) == 0
    assert capsys.readouterr().out == "e: pinned to e/t2\n"
    assert pin.run(parse("show", "x\x1b")) == 0
    assert capsys.readouterr().out == f"x\\x1b: {pin.AUTO_SAID}\n"
    assert cli.gw.calls == []


@pytest.mark.parametrize("error", [PrometheusError("down"), NoPrometheus("no stack"),
                                   ValueError("bad")])
def test_each_expected_error_is_one_line_and_a_usage_exit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: Exception) -> None:
    def fail(url: str | None) -> str:
        raise error

    monkeypatch.setattr(pin, "prometheus_url", fail)
    assert pin.run(parse("show", "e")) == 2
    assert capsys.readouterr().err == f"trainwatch baseline: error: {error}\n"


def test_the_action_is_read_by_value_as_argv_gives_it(cli: SimpleNamespace,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """sys.argv's strings are not the interned constants a test's literals are."""
    def unique(text: str) -> str:
        return "".join(list(text))

    assert pin.run(parse(unique("set"), "e/t")) == 0
    assert pin.run(parse(unique("clear"), "e")) == 0
    assert [what for what, _ in cli.gw.calls] == ["push", "delete"]
    assert capsys.readouterr().out.splitlines()[1].startswith("cleared: e is judged")
