"""trainwatch/demo/run.py in process: the trials sized to the node (their share of a core, when
the node is crowded, the line saying so), the polling (how often, until when, what it says on
giving up), the stack it asks for (fresh ports, short windows, its own Alertmanager config, old
news removed), the trials' command lines, the story's steps (alert, judgement, diagnose of each
trial, resolution, every notification) and what the whole run leaves running or stops.

Time is a fake clock (the polls' sleeps advance it); what would start processes (the stack, the
trials, `trainwatch diagnose`'s Prometheus) or render with amtool is stood in for, recording
what it was given. The notifications are read from a real JSON-lines file as the stack's webhook
receiver writes it."""

from __future__ import annotations

import importlib
import io
import json
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from trainwatch.contract.records import RecordNames
from trainwatch.demo import show
from trainwatch.demo.run import DemoError, Sizing
from trainwatch.layout import StateDir
from trainwatch.stack.services import notifications_file
from trainwatch.stack.settings import DEFAULT_PORTS, StackSettings

# trainwatch.demo exports the function run, which hides its module of the same name.
demo_run = importlib.import_module("trainwatch.demo.run")


START = 7777.25  # no round number: a remainder or a product of it is no difference


@dataclass
class Clock:
    now: float = START
    sleeps: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(demo_run, "time", SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


# --- sizing


@pytest.mark.parametrize(("cpus", "busy", "share"), [
    (2, 0.3, 0.45),  # (2 * 0.7 - 0.5) / 2
    (2, 0.123, 0.63),  # 0.627 rounded to two places
    (16, 0.1, 1.0),  # at most a whole core
    (1, 0.9, 0.1),  # at least MIN_SHARE, though nothing is spare
    (1, 0.25, 0.12),  # (0.75 - 0.5) / 2 = 0.125, rounded half to even
])
def test_the_healthy_trials_share_is_half_the_spare_cores_within_its_bounds(
        cpus: int, busy: float, share: float) -> None:
    assert Sizing.of(cpus=cpus, busy=busy) == Sizing(cpus, busy, share)


def test_the_spare_cores_are_what_the_node_and_the_stack_leave_never_below_0() -> None:
    assert Sizing.spare_of(4, 0.25) == 2.5
    assert Sizing.spare_of(1, 0.75) == 0.0
    assert Sizing.spare_of(1, 1.0) == 0.0


@pytest.mark.parametrize(("cpus", "busy", "crowded"), [
    (1, 0.28, False), (1, 0.32, True), (1, 0.25, False), (8, 0.99, True), (8, 0.5, False)])
def test_crowded_when_the_spare_halved_is_under_the_least_share(
        cpus: int, busy: float, crowded: bool) -> None:
    assert Sizing.of(cpus, busy).crowded is crowded


def test_the_sizing_line_says_the_figures_and_warns_only_when_crowded() -> None:
    assert Sizing.of(2, 0.3).line() == (
        "Sized to this machine: 2 cores, 30% busy before the demo: one torch thread per trial "
        "(OMP_NUM_THREADS=1), no loader workers; the healthy trial computes on at most 45% of "
        "a core (its train_batch waits the rest, as for an accelerator)")
    assert Sizing.of(1, 0.95).line().endswith(
        "at most 10% of a core (its train_batch waits the rest, as for an accelerator); other "
        "work keeps this node busy: TrainwatchCPUSaturated may fire and diagnose may say "
        "\"Node CPUs saturated\" for both trials, whatever they do")


def test_measured_reads_the_cpu_count_and_a_one_second_busy_ratio(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil
    asked: list[float] = []
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: asked.append(interval) or 30.0)
    monkeypatch.setattr(demo_run.os, "cpu_count", lambda: 2)
    assert Sizing.measured() == Sizing(2, 0.3, 0.45) and asked == [1.0]
    monkeypatch.setattr(demo_run.os, "cpu_count", lambda: None)  # unknown: one
    assert Sizing.measured() == Sizing(1, 0.3, 0.1)


def test_a_free_port_is_a_loopback_port_nothing_listens_on() -> None:
    port = demo_run.free_port()
    assert isinstance(port, int) and 1024 <= port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


# --- polling


def test_wait_for_polls_every_half_second_checking_first_until_a_truthy_answer(
        clock: Clock) -> None:
    answers, seen = iter([None, 0, [], "found"]), []

    def probe() -> Any:
        seen.append(("probe", clock.now))
        return next(answers)
    assert demo_run.wait_for(probe, 10, "x", lambda: seen.append(("check", clock.now))) == "found"
    assert seen == [(what, START + t) for t in (0.0, 0.5, 1.0, 1.5)
                    for what in ("check", "probe")]
    assert clock.sleeps == [0.5] * 3


def test_wait_for_gives_up_at_its_deadline_naming_what_it_waited_for(clock: Clock) -> None:
    probes: list[float] = []
    with pytest.raises(DemoError) as err:
        demo_run.wait_for(lambda: probes.append(clock.now), 1.4, "the alert")
    assert str(err.value) == "gave up after 1 s waiting for the alert"
    assert probes == [START, START + 0.5, START + 1.0]
    probes.clear()
    with pytest.raises(DemoError, match="gave up after 2 s waiting"):
        demo_run.wait_for(lambda: probes.append(clock.now), 1.5, "x")
    assert len(probes) == 3  # at 0, 0.5, 1.0; at 1.5 the deadline has come


def test_a_check_that_raises_ends_the_wait_before_the_probe(clock: Clock) -> None:
    def check() -> None:
        raise DemoError("trial exited")
    with pytest.raises(DemoError, match="trial exited"):
        demo_run.wait_for(lambda: pytest.fail("probed"), 10, "x", check)


# --- notifications


def note(status: str, trial: str, runbook: str = "http://rb/#dl", alertname: str = demo_run.ALERT
         ) -> dict[str, Any]:
    return {"receiver": "trainwatch-webhook", "status": status, "alerts": [{
        "status": status, "labels": {"alertname": alertname, "experiment": "demo",
                                     "trial": trial},
        "annotations": {"runbook_url": runbook}}]}


def deliver(state: StateDir, *notes: dict[str, Any], garbage: bool = False) -> None:
    path = notifications_file(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        for i, one in enumerate(notes):
            out.write(json.dumps({"received": f"2026-01-01T00:00:{i:02d}Z",
                                  "notification": one}) + "\n")
        if garbage:
            out.write('{"received": "cut sh')


def test_delivered_is_every_whole_notification_in_order(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert demo_run.delivered(state) == []
    deliver(state, note("firing", "a"), note("resolved", "a"), garbage=True)
    assert demo_run.delivered(state) == [note("firing", "a"), note("resolved", "a")]


def test_settled_answers_once_nothing_new_came_for_two_grouping_intervals(
        tmp_path: Path, clock: Clock) -> None:
    state = StateDir(tmp_path)
    probe = demo_run.settled(state)
    assert probe() is None  # nothing yet, first look: not settled
    clock.now += 5.75
    assert probe() is None
    deliver(state, note("firing", "a"))
    clock.now += 6.5
    assert probe() is None  # a new one came: the wait starts again
    clock.now += 5.5
    assert probe() is None
    clock.now += 0.5  # 6.0 s, two intervals of 3 s, without news
    assert probe() == [("2026-01-01T00:00:00Z", note("firing", "a"))]


def test_settled_with_none_at_all_is_an_empty_list_after_the_intervals(
        tmp_path: Path, clock: Clock) -> None:
    probe = demo_run.settled(StateDir(tmp_path))
    assert probe() is None
    clock.now += 6.0
    assert probe() == []


# --- the stack


@pytest.fixture
def stack_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []

    def down(state: StateDir, say: Any) -> int:
        say("stopped it")  # said to nobody
        seen.append(("down", state, notifications_file(state).exists()))
        return 0

    def up(state: StateDir, settings: StackSettings, say: Any) -> int:
        seen.append(("up", state, settings, notifications_file(state).exists()))
        say("pushgateway started")
        say("prometheus started")
        return 0
    monkeypatch.setattr(demo_run.commands, "down", down)
    monkeypatch.setattr(demo_run, "stack_up", up)
    return seen


def test_the_stack_is_fresh_on_free_ports_with_short_windows_and_its_own_alertmanager_config(
        tmp_path: Path, stack_calls: list[tuple[Any, ...]]) -> None:
    state = StateDir(tmp_path / "s")
    deliver(state, note("firing", "old"))  # a previous run's: gone before the stack starts
    out = io.StringIO()
    settings = demo_run.start_stack(state, out)
    [down, (_, up_state, asked, old_news)] = stack_calls
    assert down == ("down", state, True) and up_state == state and old_news is False
    assert asked is settings
    assert sorted(settings.ports) == sorted(DEFAULT_PORTS)
    assert not set(settings.ports.values()) & set(DEFAULT_PORTS.values())
    config = state.root / "demo" / "alertmanager.yml"
    assert settings == StackSettings(ports=settings.ports, for_="10s", rate_window="15s",
                                     scrape_interval="2s", alertmanager_config=str(config))
    written = yaml.safe_load(config.read_text())
    assert {(k, written["route"][k]) for k in ("group_wait", "group_interval",
                                               "repeat_interval")} == {
        ("group_wait", "2s"), ("group_interval", "3s"), ("repeat_interval", "1h")}
    hooks = [h["url"] for r in written["receivers"] for h in r["webhook_configs"]]
    assert hooks and set(hooks) == {f"http://127.0.0.1:{settings.ports['webhook']}/alerts"}
    assert out.getvalue() == (f"== trainwatch stack up --state-dir {state.root} --for 10s "
                              "--rate-window 15s --scrape-interval 2s ==\n"
                              "  pushgateway started\n  prometheus started\n")


def test_two_stacks_in_a_row_get_their_own_ports(tmp_path: Path,
                                                stack_calls: list[tuple[Any, ...]]) -> None:
    first = demo_run.start_stack(StateDir(tmp_path / "a"), io.StringIO())
    second = demo_run.start_stack(StateDir(tmp_path / "b"), io.StringIO())
    assert first.ports != second.ports


def test_an_unhealthy_stack_ends_the_demo_naming_how_to_see_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        stack_calls: list[tuple[Any, ...]]) -> None:
    monkeypatch.setattr(demo_run, "stack_up", lambda state, settings, say: 1)
    state = StateDir(tmp_path)
    with pytest.raises(DemoError) as err:
        demo_run.start_stack(state, io.StringIO())
    assert str(err.value) == ("the stack is not healthy: see `trainwatch stack status "
                              f"--state-dir {state.root}`")


# --- the trials


def test_the_trials_command_lines_logs_and_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[dict[str, Any]] = []

    def popen(argv: list[str], **kw: Any) -> str:
        started.append({"argv": argv, "log": kw.pop("stdout").name, **kw})
        return f"proc-{argv[argv.index('--trial') + 1]}"
    monkeypatch.setattr(demo_run.subprocess, "Popen", popen)
    monkeypatch.setenv("KEPT", "yes")
    state = StateDir(tmp_path)
    (state.root / "demo").mkdir()
    procs = demo_run.start_trials(state, "http://127.0.0.1:4242", 45.5, Sizing.of(2, 0.3))
    assert procs == {"slow-loader": "proc-slow-loader", "healthy": "proc-healthy"}
    example = str(demo_run.project_file("examples/pytorch_loop.py"))
    head = [demo_run.sys.executable, example, "--experiment", "demo", "--trial"]
    common = ["--pushgateway", "http://127.0.0.1:4242", "--max-seconds", "45.5", "--workers",
              "0", "--batch-size", "8", "--push-interval", "1"]
    assert [s["argv"] for s in started] == [
        [*head, "slow-loader", *common, "--loader-delay", "0.05", "--steps", "100"],
        [*head, "healthy", *common, "--steps", "2000", "--cpu-share", "0.45"]]
    for s, trial in zip(started, ("slow-loader", "healthy"), strict=True):
        assert s["log"] == str(state.root / "demo" / f"trial-{trial}.log")
        assert s["stderr"] is subprocess.STDOUT and s["start_new_session"] is True
        assert s["env"]["OMP_NUM_THREADS"] == "1" and s["env"]["KEPT"] == "yes"


# --- the story


class Proc:
    """A trial: running until told, then its exit code; records what was asked of it."""

    def __init__(self, code: int | None = None, hangs: bool = False) -> None:
        self.returncode, self.hangs, self.asked = code, hangs, []  # type: ignore[var-annotated]

    def poll(self) -> int | None:
        self.asked.append("poll")
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.asked.append(("wait", timeout))
        if self.hangs:
            raise subprocess.TimeoutExpired("trial", timeout or 0)
        self.returncode = 0 if self.returncode is None else self.returncode
        return self.returncode

    def terminate(self) -> None:
        self.asked.append("terminate")
        self.returncode = -15


@dataclass
class Story:
    state: StateDir
    settings: StackSettings
    trials: dict[str, Proc]
    calls: list[Any] = field(default_factory=list)
    judged: list[Any] = field(default_factory=lambda: [[], [{"value": 6}]])
    alerts: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Story:
    state = StateDir(tmp_path)
    (state.root / "demo").mkdir(parents=True)
    s = Story(state, StackSettings(ports={**DEFAULT_PORTS, "prometheus": 31911}),
              {"slow-loader": Proc(), "healthy": Proc()})
    s.alerts = [{"labels": {"alertname": demo_run.ALERT, "experiment": "demo",
                            "trial": "slow-loader"}, "state": "firing"},
                {"labels": {"alertname": "TrainwatchCPUSaturated", "instance": "n1"},
                 "state": "firing"}]

    class API:
        def __init__(self, url: str) -> None:
            s.calls.append(("api", url))

        def query(self, promql: str) -> Any:
            s.calls.append(("query", promql))
            return s.judged.pop(0)

        def alerts(self) -> list[dict[str, Any]]:
            s.calls.append(("alerts",))
            return s.alerts

    def main(argv: list[str]) -> int:
        s.calls.append(("diagnose", argv))
        print(f"DIAGNOSED {argv[-1]}")
        return {"slow-loader": 1, "healthy": 0}[argv[-1]]

    monkeypatch.setattr(demo_run, "PrometheusAPI", API)
    monkeypatch.setattr(demo_run.cli, "main", main)
    monkeypatch.setattr(show, "notification_text", lambda n, templates: (
        f"[{n['status'].upper()}] {n['alerts'][0]['labels']['trial']}\n"
        f"{n['alerts'][0]['annotations']['runbook_url']}"))
    return s


def tell(s: Story, out: io.StringIO | None = None) -> tuple[str, demo_run.DemoResult, str]:
    out = out or io.StringIO()
    result = demo_run.DemoResult()
    runbook = demo_run._story(s.state, s.settings, s.trials, 40.0, result, out)  # type: ignore[arg-type]
    return runbook, result, out.getvalue()


def test_the_story_alert_judgement_diagnoses_resolution_and_every_notification(
        story: Story, clock: Clock) -> None:
    deliver(story.state, note("firing", "healthy", alertname="Other"),
            note("firing", "slow-loader", runbook="http://rb/#first"),
            note("firing", "slow-loader", runbook="http://rb/#repeat"),
            note("resolved", "slow-loader", runbook="http://rb/#after"),
            note("resolved", "slow-loader", runbook="http://rb/#again"))
    runbook, result, out = tell(story)  # the first of each is shown
    assert runbook == "http://rb/#first"
    share = RecordNames("15s").phase_share
    assert story.calls[:4] == [
        ("api", "http://127.0.0.1:31911"),
        ("query", (f'count_over_time({share}{{trial="healthy", phase="dataloader_next"}}[14s]) '
                  ">= 6")),
        ("query", (f'count_over_time({share}{{trial="healthy", phase="dataloader_next"}}[14s]) '
                  ">= 6")),
        ("alerts",)]
    assert [c[1] for c in story.calls if c[0] == "diagnose"] == [
        ["diagnose", "--prometheus", "http://127.0.0.1:31911", "--experiment", "demo",
         "--trial", trial] for trial in ("slow-loader", "healthy")]
    assert result.fired == {"slow-loader": [demo_run.ALERT], "healthy": []}
    assert result.node_alerts == ["TrainwatchCPUSaturated (n1)"]
    assert result.diagnose_exit == {"slow-loader": 1, "healthy": 0}
    assert result.trial_exit == {"slow-loader": 0, "healthy": 0}
    for proc in story.trials.values():
        assert ("wait", 160.0) in proc.asked and "terminate" not in proc.asked
    assert out.index("== Alerts firing in Prometheus ==") < out.index(
        "== Notification delivered (webhook receiver 'trainwatch-webhook') ==\n"
        "  [FIRING] slow-loader\n  http://rb/#first\n") < out.index(
        "== trainwatch diagnose --experiment demo --trial slow-loader ==\nDIAGNOSED "
        "slow-loader\n") < out.index(
        "== trainwatch diagnose --experiment demo --trial healthy ==\nDIAGNOSED healthy\n"
        "\n(the trials run on to the end of their time budget...)\n") < out.index(
        "== Resolved, after slow-loader ended cleanly (webhook receiver "
        "'trainwatch-webhook') ==\n  [RESOLVED] slow-loader\n  http://rb/#after\n") < out.index(
        "== Every notification delivered (5; ")
    assert out.endswith("  2026-01-01T00:00:00Z  [FIRING] healthy\n"
                        "  2026-01-01T00:00:01Z  [FIRING] slow-loader\n"
                        "  2026-01-01T00:00:02Z  [FIRING] slow-loader\n"
                        "  2026-01-01T00:00:03Z  [RESOLVED] slow-loader\n"
                        "  2026-01-01T00:00:04Z  [RESOLVED] slow-loader\n")
    assert clock.now - START >= 6.0  # every notification: only once they settled


def test_a_trial_that_ends_before_the_alert_ends_the_story(story: Story) -> None:
    story.trials["healthy"] = Proc(code=3)
    with pytest.raises(DemoError) as err:
        tell(story)
    assert str(err.value) == ("trial healthy exited with 3 too early: see "
                              f"{story.state.root / 'demo' / 'trial-healthy.log'}")


def test_a_trial_past_its_budget_ends_the_story(story: Story) -> None:
    deliver(story.state, note("firing", "slow-loader"))
    story.trials["slow-loader"] = Proc(hangs=True)
    with pytest.raises(DemoError) as err:
        tell(story)
    assert str(err.value) == "trial slow-loader ran past its 40 s budget"
    assert err.value.__suppress_context__


def test_no_alert_for_the_slow_trial_is_waited_for_90_seconds(story: Story, clock: Clock) -> None:
    deliver(story.state, note("firing", "healthy"), note("resolved", "slow-loader"))
    with pytest.raises(DemoError) as err:
        tell(story)
    assert str(err.value) == (f"gave up after 90 s waiting for {demo_run.ALERT} to be "
                              "delivered for slow-loader")
    assert clock.now == START + 90.0


# --- the whole run


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {"calls": []}
    settings = StackSettings(ports={name: 32000 + i for i, name in enumerate(DEFAULT_PORTS)})
    trials = {"slow-loader": Proc(), "healthy": Proc(code=0)}
    seen["trials"] = trials
    monkeypatch.setattr(Sizing, "measured", classmethod(lambda cls: Sizing.of(2, 0.3)))

    def start_stack(state: StateDir, out: Any) -> StackSettings:
        seen["calls"].append(("stack", state, (state.root / "demo").is_dir()))
        out.write("STACK\n")
        return settings

    def start_trials(state: StateDir, pushgateway: str, seconds: float, sizing: Sizing) -> Any:
        seen["calls"].append(("trials", pushgateway, seconds, sizing))
        return trials

    def story(state: StateDir, s: Any, t: Any, seconds: float, result: Any, out: Any) -> str:
        seen["calls"].append(("story", s is settings, t is trials, seconds))
        deliver(state, note("firing", "slow-loader"))
        if seen.get("fails"):
            raise DemoError("no alert")
        return "http://rb/#x"

    def next_steps(out: Any, urls: dict[str, str], root: Path, experiment: str, share: str,
                   runbook: str) -> None:
        seen["calls"].append(("next", urls, root, experiment, share, runbook))

    monkeypatch.setattr(demo_run, "start_stack", start_stack)
    monkeypatch.setattr(demo_run, "start_trials", start_trials)
    monkeypatch.setattr(demo_run, "_story", story)
    answers = {"prometheus": 200, "alertmanager": 200, "webhook": 204, "grafana": None}
    by_url = {f"http://127.0.0.1:{settings.ports[s]}{demo_run.READY_PATHS[s]}": answers.get(s, 503)
              for s in DEFAULT_PORTS}
    monkeypatch.setattr(demo_run, "http_status", lambda u: seen["calls"].append(("http", u)) or
                        by_url[u])
    monkeypatch.setattr(show, "print_next_steps", next_steps)
    seen["settings"] = settings
    return seen


def test_the_whole_run_in_order_stopping_what_still_runs_and_pointing_at_what_answers(
        whole: dict[str, Any], tmp_path: Path) -> None:
    out = io.StringIO()
    result = demo_run.run(tmp_path / "s", 33.5, out)
    state = StateDir(tmp_path / "s")
    settings = whole["settings"]
    calls = [c for c in whole["calls"] if c[0] != "http"]
    assert calls == [
        ("stack", state, True),
        ("trials", settings.url("pushgateway"), 33.5, Sizing.of(2, 0.3)),
        ("story", True, True, 33.5),
        ("next", {"prometheus": settings.url("prometheus"),
                  "alertmanager": settings.url("alertmanager")}, state.root, "demo",
         RecordNames("15s").phase_share, "http://rb/#x")]
    assert result.sizing == Sizing.of(2, 0.3)
    assert result.notifications == [note("firing", "slow-loader")]
    assert whole["trials"]["slow-loader"].asked == ["poll", "terminate", ("wait", None)]
    assert whole["trials"]["healthy"].asked == ["poll"]  # ended: left alone
    assert out.getvalue() == (
        f"STACK\n\n== {Sizing.of(2, 0.3).line()} ==\n\n== Two PyTorch trials of experiment "
        "'demo' for 33.5 s: slow-loader (50 ms per batch in its Dataset) and healthy ==\n")
    assert sorted(c[1] for c in whole["calls"] if c[0] == "http") == sorted(
        settings.url(s) + demo_run.READY_PATHS[s] for s in DEFAULT_PORTS)


def test_a_failed_story_still_stops_the_trials_and_keeps_what_was_delivered(
        whole: dict[str, Any], tmp_path: Path) -> None:
    whole["fails"] = True
    with pytest.raises(DemoError, match="no alert"):
        demo_run.run(tmp_path / "s", 45.0, io.StringIO())
    assert "terminate" in whole["trials"]["slow-loader"].asked
    assert not any(c[0] == "next" for c in whole["calls"])


def test_a_second_run_in_the_same_state_directory_runs_too(whole: dict[str, Any],
                                                            tmp_path: Path) -> None:
    demo_run.run(tmp_path / "s", 45.0, io.StringIO())
    whole["trials"]["slow-loader"].returncode = None
    demo_run.run(tmp_path / "s", 45.0, io.StringIO())
    assert [c[0] for c in whole["calls"] if c[0] == "next"] == ["next", "next"]


def test_the_healthy_trial_not_judged_is_waited_for_60_seconds(story: Story,
                                                               clock: Clock) -> None:
    deliver(story.state, note("firing", "slow-loader"))
    story.judged = [[]] * 1000
    with pytest.raises(DemoError, match="^gave up after 60 s waiting for the healthy trial to "
                       "be judged$"):
        tell(story)
    assert clock.now == START + 60.0


def test_a_resolution_never_delivered_is_waited_for_60_seconds_after_the_trials(
        story: Story, clock: Clock) -> None:
    deliver(story.state, note("firing", "slow-loader"))
    with pytest.raises(DemoError, match="^gave up after 60 s waiting for the resolution to be "
                       "delivered$"):
        tell(story)
    assert clock.now == START + 0.5 + 60.0  # one poll for the judgement, then the resolution's


def test_notifications_that_never_settle_are_waited_for_30_seconds(
        story: Story, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    deliver(story.state, note("firing", "slow-loader"), note("resolved", "slow-loader"))
    monkeypatch.setattr(demo_run, "settled", lambda state: lambda: None)
    with pytest.raises(DemoError, match="^gave up after 30 s waiting for Alertmanager's last "
                       "notifications$"):
        tell(story)
    assert clock.now == START + 0.5 + 30.0


def test_settled_counts_what_is_there_at_the_first_look_and_any_change_as_news(
        tmp_path: Path, clock: Clock) -> None:
    state = StateDir(tmp_path)
    deliver(state, note("firing", "a"))
    probe = demo_run.settled(state)
    assert probe() is None  # one there already: not settled at the first look
    clock.now += 7.25  # past the two intervals, no probe on the dot
    assert probe() == [("2026-01-01T00:00:00Z", note("firing", "a"))]
    notifications_file(state).unlink()
    deliver(state)  # fewer than before: a change too
    assert probe() is None
    clock.now += 6.5
    assert probe() == []


def test_settled_with_hundreds_of_notifications_compares_their_count_by_value(
        tmp_path: Path, clock: Clock) -> None:
    state = StateDir(tmp_path)
    deliver(state, *[note("firing", f"t{i}") for i in range(300)])
    probe = demo_run.settled(state)
    assert probe() is None
    clock.now += 6.5
    assert len(probe() or []) == 300


def test_a_sizing_is_a_frozen_value() -> None:
    import dataclasses
    sizing = Sizing.of(2, 0.3)
    assert hash(sizing) == hash(Sizing.of(2, 0.3)) and len({sizing, Sizing.of(2, 0.3)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizing.cpu_share = 1.0  # type: ignore[misc]


def test_the_demo_runs_45_seconds_unless_told(whole: dict[str, Any], tmp_path: Path) -> None:
    demo_run.run(tmp_path / "s", out=io.StringIO())
    assert [c[2] for c in whole["calls"] if c[0] == "trials"] == [45.0]
