"""trainwatch/diagnose/cli.py, `trainwatch diagnose | trials | compare | check` parsed and run in
process: which server each reads (one given is read unasked; of several, the one holding the
trial, and compare refuses two trials on two servers), what each collaborator is handed, what is
printed (text or JSON, the global view's note first), the exit codes (the worst rank's; every
error one printable line and 2, bad input before any server is asked).

Reading Prometheus is stood in for one level up, where the glue hands over: the rule source, the
trial listing, the runs, the comparison, the check, the baselines and the renderers record what
they are given and answer with values of their own (``servers.holds`` answers from a table, so
``holding`` itself is the real one)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from trainwatch import cli
from trainwatch.diagnose import baseline, check, compare, render, servers
from trainwatch.diagnose import cli as diagnose_cli
from trainwatch.diagnose.trials import DEFAULT_SINCE
from trainwatch.promapi import PrometheusError

A, B, C = "http://127.0.0.1:3101", "http://127.0.0.1:3102", "http://127.0.0.1:3103"


def parse(*argv: str) -> argparse.Namespace:
    """Parsed as from a command line: each word a string of its own (as sys.argv's are), never
    the interned literal the code compares it with."""
    return cli._parser().parse_args(["".join(list(word)) for word in argv])


@dataclass
class World:
    """What the stand-ins were given, and what they answer."""

    calls: list[tuple[Any, ...]] = field(default_factory=list)
    sources: dict[str, str | None] = field(default_factory=dict)  # url: the global view's note
    rows: dict[str, list[str]] = field(default_factory=dict)  # url: its trials' rows
    held: dict[str, set[tuple[str, str | None]]] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    reports: list[Any] = field(default_factory=list)
    checked_exit: int = 1

    def urls(self) -> list[str]:
        return [c[1] for c in self.calls]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()
    monkeypatch.delenv("TRAINWATCH_PROMETHEUS", raising=False)

    def deployment_of(api: Any) -> Any:
        w.calls.append(("deployment_of", api.url, api.timeout))
        return SimpleNamespace(url=api.url, source=w.sources.get(api.url))

    def holds(api: Any, experiment: str, trial: str | None, since: float | None) -> bool:
        w.calls.append(("holds", api.url, experiment, trial, since))
        if api.url in w.unreachable:
            raise PrometheusError(f"cannot reach {api.url}")
        return (experiment, trial) in w.held.get(api.url, set())

    class Baselines:
        def __init__(self, api: Any, deployment: Any) -> None:
            assert deployment.url == api.url  # the server's own deployment
            self.url = api.url
            w.calls.append(("Baselines", api.url))

        def read_runs(self, experiments: Any) -> None:
            w.calls.append(("read_runs", self.url, experiments))

    def list_trials(api: Any, deployment: Any, experiment: str | None, since: float) -> list[str]:
        assert deployment.url == api.url
        w.calls.append(("list_trials", api.url, experiment, since))
        return list(w.rows.get(api.url, []))

    def gather_runs(api: Any, deployment: Any, experiment: str, trial: str | None,
                    rank: str | None, **kw: Any) -> list[Any]:
        assert deployment.url == api.url
        w.calls.append(("gather_runs", api.url, experiment, trial, rank, kw))
        return w.reports

    def unknown_message(api: Any, since: float, experiment: str, trial: Any, rank: Any,
                        now: float) -> str:
        w.calls.append(("unknown_message", api.url, since, experiment, trial, rank, now))
        return f"no experiment {experiment}\nVERDICT: x"

    def compare_refs(api: Any, deployment: Any, first: str, second: str,
                     since: float | None) -> str:
        w.calls.append(("compare_refs", api.url, first, second, since))
        return f"compared {first} {second}"

    def checked(api: Any, deployment: Any, reference: str, base: str, slowdown: str,
                since: float | None) -> Any:
        w.calls.append(("check", api.url, reference, base, slowdown, since))
        return SimpleNamespace(exit_code=w.checked_exit, what=reference)

    for name, value in (("deployment_of", deployment_of), ("list_trials", list_trials),
                        ("gather_runs", gather_runs), ("unknown_message", unknown_message)):
        monkeypatch.setattr(diagnose_cli, name, value)
    monkeypatch.setattr(servers, "holds", holds)
    monkeypatch.setattr(baseline, "Baselines", Baselines)
    monkeypatch.setattr(baseline, "for_rows", lambda judged, rows: w.calls.append(
        ("for_rows", judged.url, list(rows))))
    monkeypatch.setattr(baseline, "for_reports", lambda judged, runs: (
        w.calls.append(("for_reports", judged.url, runs)), {"baselines": judged.url})[1])
    monkeypatch.setattr(render, "trials_json", lambda rows, notes: f"JSON rows={rows} "
                        f"notes={notes}")
    monkeypatch.setattr(render, "trials_text", lambda rows: f"TEXT rows={rows}")
    monkeypatch.setattr(render, "notes_text", lambda notes: [f"NOTE {n}" for n in notes])
    monkeypatch.setattr(render, "reports_json", lambda reports, notes, b: (
        f"JSON reports={[r.name for r in reports]} notes={notes} {b}"))
    monkeypatch.setattr(render, "reports_text", lambda reports, b: (
        f"TEXT reports={[r.name for r in reports]} {b}"))
    monkeypatch.setattr(compare, "compare_refs", compare_refs)
    monkeypatch.setattr(compare, "as_json", lambda found: f"JSON {found}")
    monkeypatch.setattr(compare, "as_text", lambda found: f"TEXT {found}")
    monkeypatch.setattr(check, "check", checked)
    monkeypatch.setattr(check, "as_json", lambda found: f"JSON check {found.what}")
    monkeypatch.setattr(check, "as_junit", lambda found: f"JUNIT check {found.what}")
    monkeypatch.setattr(check, "as_text", lambda found: f"TEXT check {found.what}")
    return w


def report(name: str, code: int | None, run: str | None = "run") -> Any:
    verdict = None if code is None else SimpleNamespace(exit_code=code)
    return SimpleNamespace(name=name, run=None if run is None else f"{run}-{name}",
                           verdict=verdict)


# --- trials


def test_trials_lists_every_shards_rows_in_order_with_the_global_views_note(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.rows = {A: ["a1", "a2"], B: ["b1"]}
    world.sources = {B: "global view at B"}
    assert diagnose_cli.run(parse("trials", "--prometheus", A, "--prometheus", B,
                                  "--timeout", "7", "--since", "2h")) == 0
    assert capsys.readouterr() == ("NOTE global view at B\nTEXT rows=['a1', 'a2', 'b1']\n", "")
    assert sorted(world.calls, key=str) == sorted([
        ("deployment_of", A, 7.0), ("Baselines", A), ("read_runs", A, None),
        ("list_trials", A, None, 7200.0), ("for_rows", A, ["a1", "a2"]),
        ("deployment_of", B, 7.0), ("Baselines", B), ("read_runs", B, None),
        ("list_trials", B, None, 7200.0), ("for_rows", B, ["b1"])], key=str)
    assert [c[1] for c in world.calls if c[0] == "for_rows"] == [A, B]
    assert not any(c[0] == "holds" for c in world.calls)  # every server lists its own


def test_trials_of_one_experiment_as_json_over_the_default_hour(
        world: World, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINWATCH_PROMETHEUS", C)
    world.rows = {C: ["c1"]}
    assert diagnose_cli.run(parse("trials", "--experiment", "bert", "--format", "json")) == 0
    assert capsys.readouterr() == ("JSON rows=['c1'] notes=[]\n", "")
    assert ("read_runs", C, ["bert"]) in world.calls
    assert ("list_trials", C, "bert", DEFAULT_SINCE) in world.calls
    assert ("deployment_of", C, 10.0) in world.calls


def test_trials_of_an_experiment_nobody_has_is_an_error_naming_close_ones(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    assert diagnose_cli.run(parse("trials", "--prometheus", A, "--prometheus", B,
                                  "--experiment", "brt", "--since", "90s")) == 2
    [(_, url, since, experiment, trial, rank, now)] = [
        c for c in world.calls if c[0] == "unknown_message"]
    assert (url, since, experiment, trial, rank) == (A, 90.0, "brt", None, None)
    assert before <= now <= time.time()
    assert capsys.readouterr() == ("", ("trainwatch trials: error: no experiment brt\\nVERDICT: "
                                   "x\n"))


def test_trials_with_no_rows_and_no_experiment_is_an_empty_list(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_cli.run(parse("trials", "--prometheus", A)) == 0
    assert capsys.readouterr() == ("TEXT rows=[]\n", "")
    assert not any(c[0] == "unknown_message" for c in world.calls)


# --- diagnose


def test_diagnose_reads_the_server_given_unasked_and_exits_with_the_worst_rank(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.reports = [report("r0", 0), report("r1", 1), report("r2", None, run=None),
                     report("r3", 0)]
    assert diagnose_cli.run(parse(
        "diagnose", "--prometheus", A, "--experiment", "e", "--trial", "t", "--rank", "3",
        "--since", "1d", "--at", "1700000000", "--window", "5m")) == 1
    assert capsys.readouterr() == (("TEXT reports=['r0', 'r1', 'r2', 'r3'] {'baselines': "
                                   f"'{A}'}}\n"), "")
    assert world.calls == [
        ("deployment_of", A, 10.0),
        ("gather_runs", A, "e", "t", "3", {"since": 86400.0, "at": 1700000000.0,
                                           "window": 300.0}),
        ("Baselines", A), ("for_reports", A, ["run-r0", "run-r1", "run-r3"])]


@pytest.mark.parametrize(("codes", "worst"), [((0, 0), 0), ((2, 1), 2), ((1, 0), 1),
                                              ((None,), 0), ((), 0)])
def test_diagnose_exits_with_the_worst_verdicts_code_and_0_without_one(
        world: World, codes: tuple[int | None, ...], worst: int) -> None:
    world.reports = [report(f"r{i}", code) for i, code in enumerate(codes)]
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e")) == worst


def test_diagnose_of_several_servers_reads_the_one_holding_the_trial_as_json_with_its_note(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.held = {B: {("e", "t")}}
    world.sources = {B: "B is a global view"}
    world.reports = [report("r0", 1)]
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--prometheus", B,
                                  "--prometheus", C, "--experiment", "e", "--trial", "t",
                                  "--format", "json")) == 1
    assert capsys.readouterr() == (("JSON reports=['r0'] notes=['B is a global view'] "
                                   f"{{'baselines': '{B}'}}\n"), "")
    assert world.calls[:3] == [("holds", A, "e", "t", None), ("holds", B, "e", "t", None),
                               ("deployment_of", B, 10.0)]
    assert not any(c[1] == C for c in world.calls)
    assert world.calls[3] == ("gather_runs", B, "e", "t", None,
                              {"since": None, "at": None, "window": None})


def test_diagnose_notes_come_before_the_text_reports(world: World,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    world.sources = {A: "global"}
    world.reports = [report("r0", 0)]
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e")) == 0
    assert capsys.readouterr().out == f"NOTE global\nTEXT reports=['r0'] {{'baselines': '{A}'}}\n"


def test_a_window_on_a_global_view_is_refused_before_any_run_is_read(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.sources = {A: "global"}
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e",
                                  "--window", "5m")) == 2
    assert capsys.readouterr() == ("", (f"trainwatch diagnose: error: --window reads the raw "
                                   f"series, which Prometheus at {A} (a global view) does not "
                                   "hold: give the shards (--prometheus once per shard) for "
                                   "--window\n"))
    assert [c[0] for c in world.calls] == ["deployment_of"]
    world.calls.clear()
    world.sources = {}
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e",
                                  "--window", "5m")) == 0  # a shard: judged over it
    assert world.calls[1][0] == "gather_runs"


def test_a_trial_on_no_server_given_names_each_and_why(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.unreachable = {B}
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--prometheus", B,
                                  "--experiment", "e", "--since", "1h")) == 2
    assert capsys.readouterr() == ("", (f"trainwatch diagnose: error: no Prometheus given holds e "
                                   f"({A}: no such trial; {B}: cannot reach {B})\n"))
    assert [c for c in world.calls if c[0] == "holds"] == [("holds", A, "e", None, 3600.0),
                                                            ("holds", B, "e", None, 3600.0)]


@pytest.mark.parametrize("error", [ValueError("bad\x1b[2J"), PrometheusError("bad\x1b[2J"),
                                   diagnose_cli.UnknownTrial("bad\x1b[2J")])
def test_each_error_is_one_printable_line_and_exit_2(
        world: World, monkeypatch: pytest.MonkeyPatch, error: Exception,
        capsys: pytest.CaptureFixture[str]) -> None:
    def fails(*args: Any, **kwargs: Any) -> Any:
        raise error
    monkeypatch.setattr(diagnose_cli, "gather_runs", fails)
    assert diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e")) == 2
    assert capsys.readouterr() == ("", "trainwatch diagnose: error: bad\\x1b[2J\n")


def test_another_error_is_not_swallowed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diagnose_cli, "gather_runs", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        diagnose_cli.run(parse("diagnose", "--prometheus", A, "--experiment", "e"))


def test_a_url_that_is_not_one_is_an_error_before_anything_is_read(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_cli.run(parse("diagnose", "--prometheus", "ftp://x", "--experiment",
                                  "e")) == 2
    assert capsys.readouterr().err.startswith("trainwatch diagnose: error: --prometheus: "
                                              "'ftp://x' is not an http(s) URL")
    assert world.calls == []


# --- compare


def test_compare_reads_the_one_server_given_unasked(world: World,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_cli.run(parse("compare", "--prometheus", A, "e/t1", "e/t2/0",
                                  "--since", "2d")) == 0
    assert capsys.readouterr() == ("TEXT compared e/t1 e/t2/0\n", "")
    assert world.calls == [("deployment_of", A, 10.0),
                           ("compare_refs", A, "e/t1", "e/t2/0", 172800.0)]


def test_compare_of_two_trials_on_one_of_several_servers_reads_it_as_json(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.held = {B: {("e", "t1"), ("f", "t2")}}
    assert diagnose_cli.run(parse("compare", "--prometheus", A, "--prometheus", B,
                                  "e/t1/1", "f/t2", "--format", "json")) == 0
    assert capsys.readouterr() == ("JSON compared e/t1/1 f/t2\n", "")
    assert [c for c in world.calls if c[0] != "holds"] == [
        ("deployment_of", B, 10.0), ("compare_refs", B, "e/t1/1", "f/t2", None)]
    assert ("holds", B, "f", "t2", None) in world.calls


def test_compare_of_trials_on_two_servers_is_refused(world: World,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    world.held = {A: {("e", "t1")}, B: {("e", "t2")}}
    assert diagnose_cli.run(parse("compare", "--prometheus", A, "--prometheus", B,
                                  "e/t1", "e/t2")) == 2
    assert capsys.readouterr() == ("", ("trainwatch compare: error: e/t1 and e/t2 are on "
                                   "different Prometheus servers; compare reads one shard's raw "
                                   "series: run diagnose on each (or on the global view)\n"))
    assert not any(c[0] == "compare_refs" for c in world.calls)


@pytest.mark.parametrize(("first", "second"), [("e", "f/t"), ("e/t", "f")])
def test_a_malformed_reference_goes_to_the_first_server_to_be_told_what_is_wrong(
        world: World, first: str, second: str) -> None:
    assert diagnose_cli.compare_server(
        [diagnose_cli.PrometheusAPI(A), diagnose_cli.PrometheusAPI(B)], first, second,
        None).url == A
    assert world.calls == []


def test_compare_on_a_global_view_is_refused(world: World,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    world.sources = {A: "global"}
    assert diagnose_cli.run(parse("compare", "--prometheus", A, "e/t1", "e/t2")) == 2
    assert capsys.readouterr() == ("", (f"trainwatch compare: error: compare reads the trials' "
                                   f"raw counters, which Prometheus at {A} (a global view) "
                                   "does not hold: give the shard holding both, or run "
                                   "diagnose on each\n"))
    assert [c[0] for c in world.calls] == ["deployment_of"]


# --- check


@pytest.mark.parametrize(("fmt", "printed"), [(None, "TEXT"), ("text", "TEXT"),
                                               ("json", "JSON"), ("junit", "JUNIT")])
def test_check_prints_its_format_and_exits_with_the_checks_code(
        world: World, fmt: str | None, printed: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    world.checked_exit = 3
    world.held = {B: {("e", "t")}}
    argv = ["check", "--prometheus", A, "--prometheus", B, "e/t", "--baseline", "e/base",
            "--max-slowdown", "7%", "--since", "3h"] + (["--format", fmt] if fmt else [])
    assert diagnose_cli.run(parse(*argv)) == 3
    assert capsys.readouterr() == (f"{printed} check e/t\n", "")
    assert world.calls == [("holds", A, "e", "t", 10800.0), ("holds", B, "e", "t", 10800.0),
                           ("deployment_of", B, 10.0),
                           ("check", B, "e/t", "e/base", "7%", 10800.0)]


def test_check_defaults_and_a_passing_check_exits_0(world: World) -> None:
    world.checked_exit = 0
    assert diagnose_cli.run(parse("check", "--prometheus", A, "e/t")) == 0
    assert world.calls[-1] == ("check", A, "e/t", check.AUTO, check.DEFAULT_MAX_SLOWDOWN, None)


@pytest.mark.parametrize("argv", [["e/t", "--max-slowdown", "lots"], ["e"]])
def test_bad_check_input_is_refused_before_any_server_is_asked(
        world: World, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_cli.run(parse("check", "--prometheus", A, "--prometheus", B, *argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainwatch check: error: ") and err.count("\n") == 1
    assert world.calls == []


# --- the parsers


def test_only_check_offers_junit_and_trials_since_defaults_to_an_hour(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("check", "e/t", "--format", "junit").format == "junit"
    for command in (["trials"], ["diagnose", "--experiment", "e"], ["compare", "a/b", "c/d"]):
        with pytest.raises(SystemExit):
            parse(*command, "--format", "junit")
        assert parse(*command).format == "text"
    assert parse("trials").since == DEFAULT_SINCE
    assert parse("diagnose", "--experiment", "e").since is None
    assert parse("trials").prometheus is None
    assert parse("diagnose", "--experiment", "e", "--at", "2023-11-14T22:13:20Z").at == (
        1700000000.0)
    with pytest.raises(SystemExit):
        parse("diagnose")  # --experiment is required


def test_compare_of_a_rank_on_the_second_server_reads_that_server(
        world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.held = {B: {("e", "t1"), ("e", "t2")}}
    assert diagnose_cli.run(parse("compare", "--prometheus", A, "--prometheus", B,
                                  "e/t1", "e/t2/0")) == 0
    assert capsys.readouterr().out == "TEXT compared e/t1 e/t2/0\n"
    assert world.calls[-1] == ("compare_refs", B, "e/t1", "e/t2/0", None)


def test_every_commands_default_format_is_one_it_offers_and_the_text_one() -> None:
    from tests.test_cli_metavars_unit import commands
    found = {}
    for name, parser in commands().items():
        for a in parser._actions:
            if "--format" in a.option_strings:
                assert a.default in a.choices, (name, a.default, a.choices)
                found[name] = a.default
    assert {"diagnose", "trials", "compare", "check"} <= set(found)
    # diagnose's commands: plain text unless asked for json or junit
    assert {found[c] for c in ("diagnose", "trials", "compare", "check")} == {"text"}
