"""`trainwatch stack status`, `down` and `notifications` (trainwatch.stack.commands) without a
stack: the inventory, the HTTP probes, the process signals and the clock faked, the state
directory and its files real in tmp_path. Each line printed, and the exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trainwatch import procs
from trainwatch.cliutil import EXIT_FOUND, EXIT_OK
from trainwatch.layout import REPO, StateDir
from trainwatch.procs import ProcRecord
from trainwatch.stack import commands, health, inventory
from trainwatch.stack.gc_loop import Pass
from trainwatch.stack.health import Target
from trainwatch.stack.inventory import Inventory
from trainwatch.stack.services import gc_status_file, notifications_file
from trainwatch.stack.settings import DEFAULT_PORTS, SERVICES, StackSettings

NOW = 1_700_000_000.0
PORTS = {"exporter": 20910, "prometheus": 20911, "pushgateway": 20912, "alertmanager": 20913,
         "grafana": 20914, "webhook": 20919}
AM = "http://127.0.0.1:20913/api/v2/alerts"


def record(service: str, pid: int, port: int | None = None) -> ProcRecord:
    argv = (service, f"--web.listen-address=127.0.0.1:{port}") if port else (service,)
    return ProcRecord(service, pid, 1, argv)


class World:
    """What the fakes answer: the inventory, each URL's status, Prometheus's API."""

    def __init__(self, state: StateDir) -> None:
        self.inv = Inventory(state)
        self.status: dict[str, int | None] = {}
        self.asked: list[str] = []
        self.nvml_absent = False
        self.targets: list[Target] | None = [Target("trainwatch-exporter", "http://x/metrics", "up", "")]
        self.managers: list[str] | None = [AM]

    def http_status(self, url: str) -> int | None:
        self.asked.append(url)
        return self.status.get(url, 200)


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    found = StateDir(tmp_path / "stack")
    found.run_dir.mkdir(parents=True)
    return found


@pytest.fixture
def world(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> World:
    fake = World(state)
    monkeypatch.setattr(inventory, "take", lambda st: fake.inv if st == state else None)
    monkeypatch.setattr(health, "http_status", fake.http_status)
    monkeypatch.setattr(health, "no_nvml", lambda url: fake.nvml_absent)
    monkeypatch.setattr(health, "targets", lambda url: fake.targets)
    monkeypatch.setattr(health, "alertmanagers", lambda url: fake.managers)
    monkeypatch.setattr(commands, "time", SimpleNamespace(time=lambda: NOW))
    return fake


def _all_alive(world: World, state: StateDir, gc_age: float = 12.0, gc_exit: int = 0) -> None:
    StackSettings(PORTS).save(state.settings_file)
    for i, service in enumerate(SERVICES):
        world.inv.alive[service] = record(service, 100 + i)
    world.inv.alive["gc"] = record("gc", 200)
    gc_status_file(state).parent.mkdir(parents=True, exist_ok=True)
    Pass(NOW - gc_age, gc_exit, 30.0).save(gc_status_file(state))


def run_status(state: StateDir) -> tuple[int, list[str]]:
    said: list[str] = []
    return commands.status(state, said.append), said


def test_no_state_directory_is_no_stack(tmp_path: Path, world: World) -> None:
    state = StateDir(tmp_path / "none")
    assert run_status(state) == (EXIT_FOUND, [f"no stack in {state.root}: run `trainwatch stack up`"])


def test_a_state_without_settings_or_processes_is_no_stack(state: StateDir, world: World) -> None:
    assert run_status(state) == (EXIT_FOUND, [f"no stack in {state.root}: run `trainwatch stack up`"])
    assert world.asked == []


def test_a_healthy_stack_is_every_line_alive_and_exit_0(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    code, said = run_status(state)
    assert said == [
        "exporter      http://127.0.0.1:20910   pid 100    alive",
        "prometheus    http://127.0.0.1:20911   pid 101    alive",
        "pushgateway   http://127.0.0.1:20912   pid 102    alive",
        "alertmanager  http://127.0.0.1:20913   pid 103    alive",
        "grafana       http://127.0.0.1:20914   pid 104    alive",
        "webhook       http://127.0.0.1:20919   pid 105    alive",
        "gc            every 30 s               pid 200    alive: last pass 12 s ago, exit 0",
        "scrape trainwatch-exporter  http://x/metrics                         up",
        "alerts  -> alertmanager http://127.0.0.1:20913: reached",
    ]
    assert code == EXIT_OK
    assert world.asked == ["http://127.0.0.1:20910/healthz", "http://127.0.0.1:20911/-/ready",
                           "http://127.0.0.1:20912/-/ready", "http://127.0.0.1:20913/-/ready",
                           "http://127.0.0.1:20914/api/health", "http://127.0.0.1:20919/-/ready"]


def test_a_service_not_ready_or_down_is_said_and_exit_1(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.status["http://127.0.0.1:20912/-/ready"] = 503
    del world.inv.alive["webhook"]
    world.inv.notes["webhook"] = "pid 9 has exited; see w.log"
    code, said = run_status(state)
    assert "pushgateway   http://127.0.0.1:20912   pid 102    alive, NOT READY" in said
    assert "webhook       http://127.0.0.1:20919              DOWN  (pid 9 has exited; see w.log)" \
        in said
    assert code == EXIT_FOUND
    assert "http://127.0.0.1:20919/-/ready" not in world.asked  # nothing to ask


@pytest.mark.parametrize("unready", ["http://127.0.0.1:20910/healthz",
                                     "http://127.0.0.1:20914/api/health"])
def test_any_one_service_not_answering_200_is_exit_1(state: StateDir, world: World,
                                                     unready: str) -> None:
    _all_alive(world, state)
    world.status[unready] = 204
    assert run_status(state)[0] == EXIT_FOUND


def test_grafana_absent_without_a_note_is_optional(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    del world.inv.alive["grafana"]
    code, said = run_status(state)
    assert said[4:6] == ["grafana       not running (optional)",  # and the services after it
                         "webhook       http://127.0.0.1:20919   pid 105    alive"]
    assert code == EXIT_OK
    del world.inv.alive["webhook"]
    code, said = run_status(state)
    assert said[5] == "webhook       http://127.0.0.1:20919              DOWN" and code == EXIT_FOUND
    world.inv.alive["webhook"] = record("webhook", 105)
    world.inv.notes["grafana"] = "pid 7 has exited"
    code, said = run_status(state)
    assert "grafana       http://127.0.0.1:20914              DOWN  (pid 7 has exited)" in said
    assert code == EXIT_FOUND


def test_an_exporter_without_nvml_says_host_metrics_only(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.nvml_absent = True
    code, said = run_status(state)
    assert said[0] == ("exporter      http://127.0.0.1:20910   pid 100    alive (no GPU: no NVML on "
                       "this machine, host metrics only)")
    assert code == EXIT_OK
    assert not any("no GPU" in line for line in said[1:])
    world.status["http://127.0.0.1:20910/healthz"] = 500
    assert run_status(state)[1][0].endswith("alive, NOT READY")


def test_the_ports_services_run_on_win_over_stack_json_and_its_loss(
        state: StateDir, world: World) -> None:
    world.inv.alive["prometheus"] = record("prometheus", 101, port=30911)
    world.managers = []
    _, said = run_status(state)  # no stack.json: the default ports, but the running one's
    assert said[1] == "prometheus    http://127.0.0.1:30911   pid 101    alive"
    assert said[0].startswith(f"exporter      http://127.0.0.1:{DEFAULT_PORTS['exporter']} ")
    StackSettings(PORTS).save(state.settings_file)
    _, said = run_status(state)
    assert said[0].startswith("exporter      http://127.0.0.1:20910 ")
    assert said[1].startswith("prometheus    http://127.0.0.1:30911 ")
    assert said[-1] == ("alerts  -> alertmanager http://127.0.0.1:20913: NOT reached "
                        "(Prometheus knows none)")


def test_stray_processes_are_named_and_unhealthy(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.inv.strays = [ProcRecord("?", 301, 1, ("python", "-c", "x" * 100)),
                        ProcRecord("?", 302, 1, ())]
    code, said = run_status(state)
    assert code == EXIT_FOUND
    assert f"stray process of this stack: pid 301 (python -c {'x' * 50}); `trainwatch stack down` " \
           "stops it" in said
    assert "stray process of this stack: pid 302 (?); `trainwatch stack down` stops it" in said


def test_prometheus_view_needs_every_target_up_and_the_alertmanager(
        state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.targets = [Target("trainwatch-exporter", "http://x/metrics", "up", ""),
                     Target("pushgateway", "http://y/metrics", "down", "connection refused")]
    code, said = run_status(state)
    assert said[-2] == ("scrape pushgateway" + " " * 10 + "http://y/metrics" + " " * 25
                        + "down (connection refused)")
    assert code == EXIT_FOUND
    world.targets = []
    assert run_status(state)[0] == EXIT_FOUND  # nothing scraped is not healthy
    world.targets = [Target("trainwatch-exporter", "http://x/metrics", "up", "")]
    world.managers = ["http://127.0.0.1:9093/api/v2/alerts"]
    code, said = run_status(state)
    assert said[-1] == ("alerts  -> alertmanager http://127.0.0.1:20913: NOT reached "
                        "(Prometheus knows ['http://127.0.0.1:9093/api/v2/alerts'])")
    assert code == EXIT_FOUND


@pytest.mark.parametrize("targets, managers", [(None, [AM]), ([], None)])
def test_prometheus_not_answering_its_api_is_said(state: StateDir, world: World,
                                                  targets: Any, managers: Any) -> None:
    _all_alive(world, state)
    world.targets, world.managers = targets, managers
    code, said = run_status(state)
    assert said[-1] == "prometheus at http://127.0.0.1:20911 does not answer its API"
    assert code == EXIT_FOUND


def test_no_prometheus_alive_means_no_prometheus_view(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    del world.inv.alive["prometheus"]
    world.targets = None
    code, said = run_status(state)
    assert not any("API" in line or line.startswith("alerts") for line in said)
    assert code == EXIT_FOUND


def gc_line(state: StateDir, rec: ProcRecord | None, note: str = "") -> tuple[bool, str]:
    said: list[str] = []
    ok = commands._gc_view(state, rec, note, said.append)
    assert len(said) == 1
    return ok, said[0]


def test_gc_down_or_without_a_pass(state: StateDir, world: World) -> None:
    assert gc_line(state, None) == (False, "gc" + " " * 48 + "DOWN")
    assert gc_line(state, None, "pid 4 has exited") == (
        False, "gc" + " " * 48 + "DOWN  (pid 4 has exited)")
    assert gc_line(state, record("gc", 44)) == (
        False, "gc" + " " * 37 + f"pid 44     alive, NO PASS YET; see {state.log_file('gc')}")


@pytest.mark.parametrize("age, code, ok, word", [
    (0.4, 0, True, "alive: last pass 0 s ago, exit 0"),
    (99.6, 0, True, "alive: last pass 100 s ago, exit 0"),  # under 3 intervals + 10 s
    (100.0, 0, False, "alive, FAILING: last pass 100 s ago, exit 0"),
    (-5.0, 0, True, "alive: last pass -5 s ago, exit 0"),
    (20.0, 1, False, "alive, LEFT GROUPS: last pass 20 s ago, exit 1"),
    (99.6, 1, False, "alive, LEFT GROUPS: last pass 100 s ago, exit 1"),
    (100.0, 1, False, "alive, FAILING: last pass 100 s ago, exit 1"),
    (250.0, 0, False, "alive, FAILING: last pass 250 s ago, exit 0"),  # well past, not just at
    (250.0, 1, False, "alive, FAILING: last pass 250 s ago, exit 1"),
    (20.0, 2, False, "alive, FAILING: last pass 20 s ago, exit 2"),
])
def test_gc_alive_is_judged_by_its_last_pass(state: StateDir, world: World, age: float, code: int,
                                             ok: bool, word: str) -> None:
    gc_status_file(state).parent.mkdir(parents=True, exist_ok=True)
    Pass(NOW - age, code, 30.0).save(gc_status_file(state))
    found_ok, line = gc_line(state, record("gc", 44), "found again")
    assert found_ok is ok
    expected = f"gc            every 30 s               pid 44     {word}  (found again)"
    assert line == expected + ("" if ok else f"; see {state.log_file('gc')}")


def test_gc_every_is_printed_as_given(state: StateDir, world: World) -> None:
    gc_status_file(state).parent.mkdir(parents=True, exist_ok=True)
    Pass(NOW - 1, 0, 1.5).save(gc_status_file(state))
    assert gc_line(state, record("gc", 44))[1].startswith("gc            every 1.5 s ")
    Pass(NOW - 14.5, 0, 1.5).save(gc_status_file(state))  # 3 x 1.5 + 10 = 14.5: late
    assert not gc_line(state, record("gc", 44))[0]


def test_an_unhealthy_gc_makes_status_exit_1(state: StateDir, world: World) -> None:
    _all_alive(world, state, gc_exit=2)
    code, said = run_status(state)
    assert code == EXIT_FOUND and "alive, FAILING" in said[6]


class Signals:
    """procs.stop and is_ours: which processes stop, which stay."""

    def __init__(self, stays: set[int]) -> None:
        self.stays, self.stopped = stays, []  # type: ignore[var-annotated]

    def stop(self, records: list[ProcRecord], stack: str) -> list[ProcRecord]:
        self.stopped.append((records, stack))
        return list(records)

    def is_ours(self, record: ProcRecord, stack: str) -> bool:
        return record.pid in self.stays


def run_down(state: StateDir, world: World, monkeypatch: pytest.MonkeyPatch,
             stays: set[int]) -> tuple[int, list[str], Signals]:
    fake = Signals(stays)
    monkeypatch.setattr(procs, "stop", fake.stop)
    monkeypatch.setattr(procs, "is_ours", fake.is_ours)
    said: list[str] = []
    return commands.down(state, said.append), said, fake


def test_down_without_a_stack_has_nothing_to_stop(tmp_path: Path, world: World,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    state = StateDir(tmp_path / "none")
    code, said, fake = run_down(state, world, monkeypatch, set())
    assert (code, said, fake.stopped) == (EXIT_OK, [f"no stack in {state.root}: nothing to stop"], [])


def test_down_stops_every_process_and_stray_and_forgets_them(
        state: StateDir, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    prom, gc = record("prometheus", 101), record("gc", 200)
    stray = ProcRecord("?", 301, 1, ())
    world.inv.alive.update(prometheus=prom, gc=gc)
    world.inv.strays = [stray]
    world.inv.notes["webhook"] = "pid 9 has exited"
    for service in ("prometheus", "gc", "grafana"):
        state.pid_file(service).write_text("{}")
    code, said, fake = run_down(state, world, monkeypatch, set())
    assert fake.stopped == [([prom, gc, stray], str(state.root))]
    assert said == ["webhook: pid 9 has exited", "stopped prometheus (pid 101)",
                    "stopped gc (pid 200)", "stopped ? (pid 301)", f"data and logs kept in {state.root}"]
    assert code == EXIT_OK and list(state.run_dir.glob("*.pid")) == []


def test_down_with_nothing_running_says_so(state: StateDir, world: World,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, said, _ = run_down(state, world, monkeypatch, set())
    assert said == [f"no process of the stack in {state.root} was running",
                    f"data and logs kept in {state.root}"]
    assert code == EXIT_OK


def test_a_process_that_will_not_stop_keeps_its_record_and_exit_1(
        state: StateDir, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.inv.alive.update(prometheus=record("prometheus", 101), webhook=record("webhook", 105))
    for service in ("prometheus", "webhook"):
        state.pid_file(service).write_text("{}")
    code, said, _ = run_down(state, world, monkeypatch, {105})
    assert said[-1] == "could not stop pid 105 (webhook); stop it yourself"
    assert not any(line.startswith("data and logs") for line in said)
    assert code == EXIT_FOUND
    assert not state.pid_file("prometheus").exists() and state.pid_file("webhook").exists()


def test_down_waits_for_no_lock_in_a_state_without_a_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = StateDir(tmp_path / "bare")
    state.root.mkdir()
    monkeypatch.setattr(inventory, "take", lambda st: Inventory(st))
    said: list[str] = []
    assert commands.down(state, said.append) == EXIT_OK
    assert said[-1] == f"data and logs kept in {state.root}"


def test_notifications_none_yet(state: StateDir) -> None:
    said: list[str] = []
    assert commands.notifications(state, said.append) == EXIT_OK
    path = state.root / "webhook" / "notifications.jsonl"
    assert said == [f"no notification delivered yet to the stack's receiver ({path})"]


def test_notifications_each_with_its_time_and_rendered_text(
        state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    path = notifications_file(state)
    path.parent.mkdir(parents=True)
    path.write_text('{"received": "2026-01-02T03:04:05Z", "notification": {"receiver": "slack\\n"}}\n'
                    'cut short\n'
                    '{"received": "2026-01-02T03:09:00Z", "notification": {"status": "resolved"}}\n')
    rendered: list[tuple[dict[str, Any], Path]] = []

    def text(note: dict[str, Any], templates: Path) -> str:
        rendered.append((note, templates))
        return f"line one of {len(rendered)}\nline two"

    monkeypatch.setattr(commands, "notification_text", text)
    said: list[str] = []
    assert commands.notifications(state, said.append) == EXIT_OK
    assert said == ["--- 2026-01-02T03:04:05Z via receiver slack\\n", "line one of 1", "line two",
                    "--- 2026-01-02T03:09:00Z via receiver ?", "line one of 2", "line two"]
    templates = REPO / "prometheus" / "alertmanager" / "templates"
    assert rendered == [({"receiver": "slack\n"}, templates), ({"status": "resolved"}, templates)]


def test_say_line_prints_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    commands.say_line("one")
    assert capsys.readouterr().out == "one\n"


def test_of_several_that_will_not_stop_the_first_is_named(
        state: StateDir, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.inv.alive.update(prometheus=record("prometheus", 101), webhook=record("webhook", 105))
    code, said, _ = run_down(state, world, monkeypatch, {101, 105})
    assert said[-1] == "could not stop pid 101 (prometheus); stop it yourself"
    assert code == EXIT_FOUND


def test_a_service_that_answers_nothing_is_not_ready(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.status["http://127.0.0.1:20913/-/ready"] = None  # connection refused: no status at all
    code, said = run_status(state)
    assert said[3] == "alertmanager  http://127.0.0.1:20913   pid 103    alive, NOT READY"
    assert code == EXIT_FOUND


def test_a_target_up_as_prometheus_spells_it_in_json_is_healthy(state: StateDir,
                                                                 world: World) -> None:
    # health.targets decodes JSON: its "up" is an equal string, not the literal's object.
    _all_alive(world, state)
    world.targets = [Target("trainwatch-exporter", "http://x/metrics", json.loads('"up"'), "")]
    assert run_status(state)[0] == EXIT_OK


def test_down_forgets_each_stopped_service_and_only_those_left(
        state: StateDir, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Records read back from pid files: their service names are equal strings, not literals.
    exporter = ProcRecord(json.loads('"exporter"'), 100, 1, ())
    prometheus = ProcRecord(json.loads('"prometheus"'), 101, 1, ())
    world.inv.alive.update(exporter=exporter, prometheus=prometheus)
    for service in ("exporter", "prometheus"):
        state.pid_file(service).write_text("{}")
    code, said, _ = run_down(state, world, monkeypatch, {100})  # the exporter will not stop
    assert said[-1] == "could not stop pid 100 (exporter); stop it yourself" and code == EXIT_FOUND
    assert state.pid_file("exporter").exists()
    assert not state.pid_file("prometheus").exists()


def test_one_notification_is_not_none(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    path = notifications_file(state)
    path.parent.mkdir(parents=True)
    path.write_text('{"received": "2026-01-02T03:04:05Z", "notification": {"receiver": "pager"}}\n')
    monkeypatch.setattr(commands, "notification_text", lambda note, templates: "firing")
    said: list[str] = []
    assert commands.notifications(state, said.append) == EXIT_OK
    assert said == ["--- 2026-01-02T03:04:05Z via receiver pager", "firing"]


class _Terminal:
    """A stdout that records writes and flushes in order (a pipe to `make run`'s log)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def write(self, text: str) -> int:
        self.events.append(f"write {text!r}")
        return len(text)

    def flush(self) -> None:
        self.events.append("flush")


def test_say_line_flushes_each_line_as_it_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    commands.say_line("one")
    assert out.events[-1] == "flush" and "write 'one'" in out.events


def test_the_gc_line_carries_gcs_own_note(state: StateDir, world: World) -> None:
    _all_alive(world, state)
    world.inv.notes.update(gc="found again after a restart", grafana="pid 7 has exited")
    _, said = run_status(state)
    assert said[6].endswith("alive: last pass 12 s ago, exit 0  (found again after a restart)")
