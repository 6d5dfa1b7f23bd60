"""trainwatch/stack/up.py, `trainwatch stack up` in process against a stand-in for what would
start, stop, poll or signal processes (procs.spawn/stop/marked, the health probes, the inventory
of live processes, the services' specs and `status`): what it starts and in which order, with
which command and files; what it leaves alone, restarts or reloads; the ports it keeps; what it
prints, line by line; what a failure stops, forgets and removes, and what it must leave."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainwatch import procs
from trainwatch.cliutil import EXIT_OK
from trainwatch.layout import StackError, StateDir
from trainwatch.lookup import ENV_PROMETHEUS
from trainwatch.procs import ProcRecord
from trainwatch.stack import configs, health, inventory, services
from trainwatch.stack import up as up_mod
from trainwatch.stack.services import ServiceSpec
from trainwatch.stack.settings import DEFAULT_PORTS, StackSettings
from trial_instrumentation import names

ORDER = up_mod.START_ORDER
PORTED = [s for s in ORDER if s in DEFAULT_PORTS]


def ask(**ports: int) -> StackSettings:
    return StackSettings(ports={name: ports.get(name) for name in DEFAULT_PORTS})  # type: ignore[misc]


@dataclass
class Stack:
    """The stand-ins' answers and what they were given."""

    state: StateDir
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    alive: dict[str, ProcRecord] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)
    grafana: bool = False
    fail: str | None = None  # the service whose start fails
    marked: list[ProcRecord] = field(default_factory=list)
    status_code: int = EXIT_OK
    hint: str | None = None
    extra_arg: dict[str, str] = field(default_factory=dict)  # service: an argument added
    answer: int | None = 200  # what health.http_status answers

    def spec(self, name: str, settings: StackSettings) -> ServiceSpec | None:
        if name == "grafana" and not self.grafana:
            return None
        if name == "gc":
            return ServiceSpec(name, ("gc-loop", "--every", "1m", *self.extra(name)),
                               status_file=self.state.data("gc") / "status.json",
                               summary="a pass every 1m")
        config = None
        if name in ("prometheus", "alertmanager"):
            config = self.state.data(name) / f"{name}.yml"
            config.parent.mkdir(parents=True, exist_ok=True)
            if not config.exists():
                config.write_text(f"{name}: 1\n")
        return ServiceSpec(name, (name, (f"--web.listen-address=127.0.0.1:"
                                  f"{settings.ports[name]}"), *self.extra(name)),
                           show_path="/metrics" if name == "exporter" else "",
                           env={"FOR": name}, cwd=Path(f"/cwd/{name}"), config=config)

    def extra(self, name: str) -> tuple[str, ...]:
        return (self.extra_arg[name],) if name in self.extra_arg else ()

    def record(self, name: str, port: int | None = None, pid: int | None = None) -> ProcRecord:
        """A live service's record, its argv as the spec would build it on ``port``."""
        settings = StackSettings(ports={**DEFAULT_PORTS, **({name: port} if port else {})})
        spec = self.spec(name, settings)
        assert spec is not None
        return ProcRecord(name, pid or 5000 + ORDER.index(name), 77, spec.argv)

    def spawned(self) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "spawn"]


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Stack:
    w = Stack(StateDir(tmp_path / "state"))
    monkeypatch.setenv("TRAINWATCH_STATE_DIR", str(w.state.root))
    monkeypatch.delenv(ENV_PROMETHEUS, raising=False)

    def take(state: StateDir) -> inventory.Inventory:
        assert state == w.state
        return inventory.Inventory(state, alive=dict(w.alive), notes=dict(w.notes))

    def spawn(name: str, argv: Any, stack_root: str, log: Path, cwd: Path,
              env: Any) -> tuple[Any, ProcRecord]:
        w.calls.append(("spawn", name, tuple(argv), stack_root, log, cwd, env))
        return f"proc-{name}", ProcRecord(name, 1000 + ORDER.index(name), 99, tuple(argv))

    def wait_ready(name: str, ready: Any, where: str, proc: Any, tail: Any) -> None:
        w.calls.append(("wait_ready", name, where, proc))
        if name == "gc":
            assert not ready()  # the old status file was removed: not ready yet
            (w.state.data("gc") / "status.json").write_text("{}")
        else:
            for w.answer in (503, 204, None):  # ready means 200, nothing else
                assert not ready()
            w.answer = 200
        assert ready()
        if name == w.fail:
            raise StackError(f"{name} exited: {tail()}")

    def http_status(url: str) -> int:
        w.calls.append(("http_status", url))
        return w.answer

    def status(state: StateDir, say: Any) -> int:
        assert state == w.state
        say("status line 1")
        say("status line 2")
        return w.status_code

    monkeypatch.setattr(inventory, "take", take)
    monkeypatch.setattr(procs, "spawn", spawn)
    monkeypatch.setattr(procs, "stop", lambda records, root: w.calls.append(
        ("stop", [r.service for r in records], root)))
    monkeypatch.setattr(procs, "marked", lambda root: iter(
        w.marked if root == str(w.state.root) else pytest.fail(f"marked({root})")))
    monkeypatch.setattr(health, "port_taken", lambda port: w.calls.append(
        ("port_taken", port)) or port in w.taken)
    monkeypatch.setattr(health, "wait_scraped", lambda p, a, timeout, say: w.calls.append(
        ("wait_scraped", p, a, timeout)))
    monkeypatch.setattr(health, "wait_ready", wait_ready)
    monkeypatch.setattr(health, "http_status", http_status)
    monkeypatch.setattr(health, "reload", lambda name, url: w.calls.append(("reload", name, url)))
    monkeypatch.setattr(services, "require_binaries", lambda: w.calls.append(("binaries",)))

    def build(name: str, state: StateDir, settings: StackSettings) -> ServiceSpec | None:
        state.data(name).mkdir(parents=True, exist_ok=True)  # as the real one does
        return w.spec(name, settings)
    monkeypatch.setattr(services, "build", build)
    monkeypatch.setattr(up_mod, "status", status)
    monkeypatch.setattr(up_mod, "path_hint", lambda: w.hint)
    return w


def run_up(w: Stack, asked: StackSettings | None = None) -> int:
    return up_mod.up(w.state, asked or ask(), say=w.said.append)


def url(service: str, ports: dict[str, int] = DEFAULT_PORTS) -> str:
    return f"http://127.0.0.1:{ports[service]}"


def listing(w: Stack, verbs: dict[str, str], pids: dict[str, int],
            ports: dict[str, int] = DEFAULT_PORTS) -> list[str]:
    lines = []
    for service in ORDER:
        if service not in verbs:
            continue
        link = "a pass every 1m" if service == "gc" else url(service, ports) + (
            "/metrics" if service == "exporter" else "")
        lines.append(f"{service:<13} {link:<38} pid {pids[service]:<8} {verbs[service]}")
    return lines


def tail_lines(w: Stack, ports: dict[str, int] = DEFAULT_PORTS, grafana: bool = False) -> list[str]:
    return [*([] if grafana else [services.GRAFANA_HINT]), f"state and logs: {w.state.root}",
            "training scripts push here with no flags after:",
            f"  export {names.ENV_PUSHGATEWAY}={url('pushgateway', ports)}"]


def test_a_fresh_up_starts_everything_in_order_and_says_where_each_is(stack: Stack) -> None:
    started = [s for s in ORDER if s != "grafana"]
    assert run_up(stack) == EXIT_OK
    assert stack.spawned() == started
    for call in (c for c in stack.calls if c[0] == "spawn"):
        _, name, argv, root, log, cwd, env = call
        expect = stack.spec(name, StackSettings(ports=DEFAULT_PORTS))
        assert (argv, root, log, cwd, env) == (expect.argv, str(stack.state.root),  # type: ignore[union-attr]
                                               stack.state.log_file(name), expect.cwd, expect.env)  # type: ignore[union-attr]
        assert ProcRecord.load(stack.state.pid_file(name)).pid == 1000 + ORDER.index(name)
    readies = [c for c in stack.calls if c[0] == "wait_ready"]
    assert readies == [("wait_ready", s, str(stack.state.data("gc") / "status.json")
                        if s == "gc" else url(s) + services.READY_PATHS[s], f"proc-{s}")
                       for s in started]
    assert [c[1] for c in stack.calls if c[0] == "http_status"] == [
        url(s) + services.READY_PATHS[s] for s in started if s != "gc" for _ in range(4)]
    assert [c[1] for c in stack.calls if c[0] == "port_taken"] == [
        DEFAULT_PORTS[s] for s in started if s != "gc"]
    waits = [c for c in stack.calls if c[0] == "wait_scraped"]
    assert waits == [("wait_scraped", url("prometheus"), url("alertmanager"), 30.0)]
    assert stack.calls.index(waits[0]) > max(i for i, c in enumerate(stack.calls)
                                             if c[0] == "spawn")
    assert stack.said == [
        *(f"starting: {s} answers (0.0 s)" for s in started),
        *listing(stack, dict.fromkeys(started, "started"),
                 {s: 1000 + ORDER.index(s) for s in started}),
        *tail_lines(stack)]
    assert StackSettings.load(stack.state.settings_file) == StackSettings(ports=DEFAULT_PORTS)
    for service in ("prometheus", "alertmanager"):  # what each started with, for the next up
        config = stack.state.data(service) / f"{service}.yml"
        assert configs.loaded_file(stack.state, service).read_text() == (
            configs.loaded_digest(config) + "\n")
    assert not configs.loaded_file(stack.state, "pushgateway").exists()
    assert not any(c[0] in ("stop", "reload") for c in stack.calls)
    assert ("binaries",) in stack.calls


def test_up_again_with_everything_running_starts_nothing_and_reloads_nothing(
        stack: Stack) -> None:
    assert run_up(stack) == EXIT_OK
    stack.alive = {s: stack.record(s) for s in ORDER if s != "grafana"}
    stack.calls.clear()
    stack.said.clear()
    assert run_up(stack) == EXIT_OK
    assert not any(c[0] in ("spawn", "stop", "reload", "port_taken", "wait_ready")
                   for c in stack.calls)
    assert stack.said == [
        *listing(stack, dict.fromkeys(stack.alive, "already running"),
                 {s: r.pid for s, r in stack.alive.items()}), *tail_lines(stack)]


def test_a_changed_config_is_reloaded_once_and_its_digest_kept(stack: Stack) -> None:
    assert run_up(stack) == EXIT_OK
    stack.alive = {s: stack.record(s) for s in ORDER if s != "grafana"}
    for service in ("prometheus", "alertmanager"):
        (stack.state.data(service) / f"{service}.yml").write_text(f"{service}: 2\n")
    stack.calls.clear()
    stack.said.clear()
    assert run_up(stack) == EXIT_OK
    assert [c for c in stack.calls if c[0] == "reload"] == [
        ("reload", "prometheus", url("prometheus")), ("reload", "alertmanager",
                                                      url("alertmanager"))]
    assert stack.said[:2] == ["prometheus: configuration or rules changed; reloaded",
                              "alertmanager: configuration changed; reloaded"]
    for service in ("prometheus", "alertmanager"):
        config = stack.state.data(service) / f"{service}.yml"
        assert configs.loaded_file(stack.state, service).read_text() == (
            configs.loaded_digest(config) + "\n")
    stack.calls.clear()
    assert run_up(stack) == EXIT_OK
    assert not any(c[0] == "reload" for c in stack.calls)  # the new digest was kept


def test_a_running_service_without_a_digest_is_reloaded_and_one_not_running_is_not(
        stack: Stack) -> None:
    assert run_up(stack) == EXIT_OK
    stack.alive = {s: stack.record(s) for s in ORDER if s not in ("grafana", "prometheus")}
    configs.loaded_file(stack.state, "alertmanager").unlink()
    configs.loaded_file(stack.state, "prometheus").unlink()
    stack.calls.clear()
    assert run_up(stack) == EXIT_OK
    assert [c for c in stack.calls if c[0] == "reload"] == [
        ("reload", "alertmanager", url("alertmanager"))]
    assert stack.spawned() == ["prometheus"]


def test_a_service_whose_command_changed_is_stopped_and_started_again(stack: Stack) -> None:
    stack.alive = {s: stack.record(s) for s in ORDER if s != "grafana"}
    for service in ("prometheus", "alertmanager"):
        stack.spec(service, StackSettings(ports=DEFAULT_PORTS))
        config = stack.state.data(service) / f"{service}.yml"
        configs.loaded_file(stack.state, service).write_text(configs.loaded_digest(config))
    stack.state.prepare()
    old = stack.alive["exporter"]
    old.save(stack.state.pid_file("exporter"))
    stack.extra_arg = {"exporter": "--new-flag"}
    assert run_up(stack) == EXIT_OK
    assert stack.said[0] == "exporter: its command line changed; restarting it"
    assert [c for c in stack.calls if c[0] == "stop"] == [
        ("stop", ["exporter"], str(stack.state.root))]
    assert stack.spawned() == ["exporter"]
    assert not any(c[0] == "reload" for c in stack.calls)
    assert ProcRecord.load(stack.state.pid_file("exporter")).argv[-1] == "--new-flag"
    assert f"exporter      {url('exporter') + '/metrics':<38} pid {1001:<8} started" in stack.said


def test_running_ports_are_kept_and_free_ports_are_asked_for(stack: Stack) -> None:
    stack.state.prepare()
    StackSettings(ports={**DEFAULT_PORTS, "webhook": 31919, "pushgateway": 31912}).save(
        stack.state.settings_file)
    stack.alive = {"exporter": stack.record("exporter", port=31910)}
    assert run_up(stack, ask(prometheus=31911)) == EXIT_OK
    ports = {**DEFAULT_PORTS, "exporter": 31910, "webhook": 31919, "pushgateway": 31912,
             "prometheus": 31911}
    assert StackSettings.load(stack.state.settings_file) == StackSettings(ports=ports)
    assert stack.said[-1] == f"  export {names.ENV_PUSHGATEWAY}={url('pushgateway', ports)}"
    assert sorted(c[1] for c in stack.calls if c[0] == "port_taken") == sorted(
        ports[s] for s in PORTED if s not in ("exporter", "grafana"))


def test_saved_ports_of_a_stack_that_no_longer_runs_are_forgotten(stack: Stack) -> None:
    stack.state.prepare()
    StackSettings(ports={**DEFAULT_PORTS, "webhook": 31919}).save(stack.state.settings_file)
    assert run_up(stack) == EXIT_OK
    assert StackSettings.load(stack.state.settings_file) == StackSettings(ports=DEFAULT_PORTS)


def test_asking_a_running_service_for_another_port_is_refused(stack: Stack) -> None:
    stack.alive = {"exporter": stack.record("exporter", port=31910)}
    with pytest.raises(StackError) as err:
        run_up(stack, ask(exporter=31999))
    assert str(err.value) == (f"exporter already runs on port 31910 in {stack.state.root}: "
                              "`trainwatch stack down` first to change ports")
    assert stack.spawned() == [] and not stack.state.settings_file.exists()
    assert run_up(stack, ask(exporter=31910)) == EXIT_OK  # the port it runs on: fine


@pytest.mark.parametrize(("taken", "message"), [
    ({"webhook"}, ("port 10919 for webhook on 127.0.0.1 is taken by another program: stop it, "
     "or pass --webhook-port PORT")),
    ({"pushgateway", "prometheus"}, ("ports 10912 for pushgateway, 10911 for prometheus on "
     "127.0.0.1 are taken by another program: stop them, or pass --pushgateway-port PORT "
     "--prometheus-port PORT"))])
def test_taken_ports_are_named_before_anything_starts_and_a_new_state_dir_goes(
        stack: Stack, taken: set[str], message: str) -> None:
    stack.taken = {DEFAULT_PORTS[s] for s in taken}
    with pytest.raises(StackError) as err:
        run_up(stack)
    assert str(err.value) == message
    assert stack.spawned() == [] and not stack.state.root.exists()


def test_a_port_taken_by_the_running_service_itself_is_no_conflict(stack: Stack) -> None:
    stack.alive = {"exporter": stack.record("exporter")}
    stack.taken = {DEFAULT_PORTS["exporter"]}
    assert run_up(stack) == EXIT_OK and "exporter" not in stack.spawned()


def test_a_failed_start_stops_and_forgets_what_this_up_started_and_keeps_the_rest(
        stack: Stack) -> None:
    stack.state.prepare()
    stack.alive = {"exporter": stack.record("exporter")}
    stack.alive["exporter"].save(stack.state.pid_file("exporter"))
    stack.fail = "alertmanager"
    stack.state.logs.mkdir(parents=True, exist_ok=True)
    stack.state.log_file("alertmanager").write_text("first\n" + "x" * 400 + "\n\n")
    with pytest.raises(StackError) as err:
        run_up(stack)
    assert str(err.value) == (f"alertmanager exited: {'x' * 300} (log: "
                              f"{stack.state.log_file('alertmanager')})")
    assert stack.spawned() == ["pushgateway", "webhook", "alertmanager"]
    assert [c for c in stack.calls if c[0] == "stop"] == [
        ("stop", ["alertmanager"], str(stack.state.root)),
        ("stop", ["pushgateway", "webhook"], str(stack.state.root))]
    for service in ("pushgateway", "webhook", "alertmanager"):
        assert not stack.state.pid_file(service).exists()
    assert stack.state.pid_file("exporter").exists()  # not this up's to stop
    assert not configs.loaded_file(stack.state, "alertmanager").exists()
    assert stack.state.root.exists()  # it was there before


@pytest.mark.parametrize("log", ["", "\n  \n"])
def test_a_failed_start_says_a_log_without_output_is_empty(stack: Stack, log: str) -> None:
    stack.fail = "pushgateway"
    stack.state.prepare()
    if log:
        stack.state.log_file("pushgateway").write_text(log)
    with pytest.raises(StackError) as err:
        run_up(stack)
    assert str(err.value) == (f"pushgateway exited: (no output) (log: "
                              f"{stack.state.log_file('pushgateway')})")


def test_a_failed_up_removes_the_state_dir_it_created_unless_a_log_or_process_explains_it(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.fail = "webhook"
    with pytest.raises(StackError):
        run_up(stack)
    assert not stack.state.root.exists()

    def writes_log(name: str, argv: Any, root: str, log: Path, cwd: Path,
                   env: Any) -> tuple[Any, ProcRecord]:
        log.write_text("it said why\n")
        return None, ProcRecord(name, 1000, 99, tuple(argv))
    monkeypatch.setattr(procs, "spawn", writes_log)
    with pytest.raises(StackError):
        run_up(stack)
    assert stack.state.log_file("pushgateway").read_text() == "it said why\n"


def test_a_failed_up_keeps_a_new_state_dir_while_a_process_of_it_runs(stack: Stack) -> None:
    stack.fail = "webhook"
    stack.marked = [ProcRecord("webhook", 4242, 1, ("webhook",))]
    with pytest.raises(StackError):
        run_up(stack)
    assert stack.state.root.exists()


def test_an_interrupt_while_starting_stops_what_started(stack: Stack,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stack.state.prepare()
    real = health.wait_ready

    def interrupted(name: str, *args: Any) -> None:
        if name == "exporter":
            raise KeyboardInterrupt
        real(name, *args)
    monkeypatch.setattr(health, "wait_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_up(stack)
    assert [c for c in stack.calls if c[0] == "stop"] == [
        ("stop", ["exporter"], str(stack.state.root)),
        ("stop", ["pushgateway"], str(stack.state.root))]


def test_grafana_when_installed_is_started_and_no_hint_is_printed(stack: Stack) -> None:
    stack.grafana = True
    assert run_up(stack) == EXIT_OK
    assert stack.spawned() == list(ORDER)
    assert services.GRAFANA_HINT not in stack.said
    assert stack.said[len(ORDER):] == [
        *listing(stack, dict.fromkeys(ORDER, "started"), {s: 1000 + ORDER.index(s) for s in ORDER}),
        *tail_lines(stack, grafana=True)]


def test_inventory_notes_come_first_and_the_path_hint_last(stack: Stack) -> None:
    stack.notes = {"exporter": "its record was corrupt; removed it", "gc": "exited"}
    stack.hint = "put trainwatch on PATH"
    assert run_up(stack) == EXIT_OK
    assert stack.said[:2] == ["exporter: its record was corrupt; removed it", "gc: exited"]
    assert stack.said[-1] == "put trainwatch on PATH"


def test_an_unhealthy_stack_says_what_status_says_and_exits_with_its_code(stack: Stack) -> None:
    stack.status_code = 1
    assert run_up(stack) == 1
    assert stack.said[-3:] == ["not healthy yet (`trainwatch stack status` again to check):",
                               "  status line 1", "  status line 2"]


def test_a_shell_pointed_elsewhere_is_told_how_to_point_at_this_stack(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PROMETHEUS, "http://127.0.0.1:9")
    assert run_up(stack) == EXIT_OK
    i = stack.said.index("the trainwatch CLI reads another stack in this shell; point it at "
                         "this one:")
    assert stack.said[i - 1] == f"state and logs: {stack.state.root}"
    assert stack.said[i + 1] == (f"  export TRAINWATCH_STATE_DIR={stack.state.root} "
                                 f"TRAINWATCH_PROMETHEUS={url('prometheus')}")
    assert stack.said[i + 2] == "training scripts push here with no flags after:"


def test_a_lock_held_by_another_up_is_refused_and_keeps_the_directory(stack: Stack) -> None:
    import fcntl
    stack.state.prepare()
    with open(stack.state.run_dir / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StackError, match="another `trainwatch stack` command"):
            run_up(stack)
    assert stack.state.root.exists() and stack.spawned() == []


def test_the_cli_pointer_is_none_only_where_the_cli_finds_this_stack_already(
        tmp_path: Path) -> None:
    state = StateDir(tmp_path / "a b")
    prom = "http://127.0.0.1:19090"
    line = f"export TRAINWATCH_STATE_DIR='{state.root}' TRAINWATCH_PROMETHEUS={prom}"
    assert up_mod.cli_pointer(state, prom, {"TRAINWATCH_STATE_DIR": str(state.root)}) is None
    assert up_mod.cli_pointer(state, prom, {"TRAINWATCH_STATE_DIR": str(state.root),
                                            ENV_PROMETHEUS: "".join(prom)}) is None  # equal
    assert up_mod.cli_pointer(state, prom, {"TRAINWATCH_STATE_DIR": str(state.root),
                                            ENV_PROMETHEUS: "http://127.0.0.1:1"}) == line
    assert up_mod.cli_pointer(state, prom, {"TRAINWATCH_STATE_DIR": str(tmp_path),
                                            ENV_PROMETHEUS: prom}) == line
    assert up_mod.cli_pointer(state, prom, {}) == line


def test_say_defaults_to_printing_each_line(stack: Stack,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert up_mod.up(stack.state, ask()) == EXIT_OK
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "starting: pushgateway answers (0.0 s)"
    assert out.endswith(f"export {names.ENV_PUSHGATEWAY}={url('pushgateway')}\n")


@pytest.mark.parametrize(("log", "kept"), [("", False), ("!", True)])
def test_a_failed_up_removes_a_new_state_dir_whose_logs_are_all_empty(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, log: str, kept: bool) -> None:
    def writes_log(name: str, argv: Any, root: str, path: Path, cwd: Path,
                   env: Any) -> tuple[Any, ProcRecord]:
        path.write_text(log)
        return None, ProcRecord(name, 1000, 99, tuple(argv))
    monkeypatch.setattr(procs, "spawn", writes_log)
    stack.fail = "pushgateway"
    with pytest.raises(StackError):
        run_up(stack)
    assert stack.state.root.exists() is kept


def test_a_new_state_dir_already_gone_when_up_fails_still_gives_ups_own_error(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    def removed_then_fails(name: str, *args: Any) -> None:
        shutil.rmtree(stack.state.root)
        raise StackError("webhook exited")
    monkeypatch.setattr(health, "wait_ready", removed_then_fails)
    with pytest.raises(StackError, match="webhook exited"):
        run_up(stack)


def test_asking_a_running_service_for_a_lower_port_is_refused_too(stack: Stack) -> None:
    stack.alive = {"exporter": stack.record("exporter", port=31910)}
    with pytest.raises(StackError, match="exporter already runs on port 31910"):
        run_up(stack, ask(exporter=31900))


def test_a_service_whose_command_lost_an_argument_is_restarted(stack: Stack) -> None:
    stack.extra_arg = {"webhook": "--old-flag"}
    stack.alive = {"webhook": stack.record("webhook")}
    stack.extra_arg = {}
    assert run_up(stack) == EXIT_OK
    assert stack.said[0] == "webhook: its command line changed; restarting it"
    assert "webhook" in stack.spawned()


def test_alertmanager_alone_changed_is_reloaded_after_an_unchanged_prometheus(
        stack: Stack) -> None:
    assert run_up(stack) == EXIT_OK
    stack.alive = {s: stack.record(s) for s in ORDER if s != "grafana"}
    (stack.state.data("alertmanager") / "alertmanager.yml").write_text("alertmanager: 2\n")
    stack.calls.clear()
    stack.said.clear()
    assert run_up(stack) == EXIT_OK
    assert [c for c in stack.calls if c[0] == "reload"] == [
        ("reload", "alertmanager", url("alertmanager"))]
    assert stack.said[0] == "alertmanager: configuration changed; reloaded"


def test_a_shell_pointed_at_a_state_dir_sorting_after_this_one_is_told_too(
        tmp_path: Path) -> None:
    state = StateDir(tmp_path / "a")
    prom = "http://127.0.0.1:19090"
    assert up_mod.cli_pointer(state, prom, {"TRAINWATCH_STATE_DIR": str(tmp_path / "z"),
                                            ENV_PROMETHEUS: prom}) == (
        f"export TRAINWATCH_STATE_DIR={state.root} TRAINWATCH_PROMETHEUS={prom}")


def test_the_start_order_holds_every_service_once_each_after_what_it_needs() -> None:
    """Every service with a readiness path, and gc, started once; Prometheus after what it
    scrapes and sends alerts to, gc after the Pushgateway it cleans, the webhook before the
    Alertmanager that notifies it."""
    from trainwatch.stack.settings import READY_PATHS
    assert len(set(ORDER)) == len(ORDER) and set(ORDER) == {*READY_PATHS, "gc"}
    at = {service: i for i, service in enumerate(ORDER)}
    assert max(at["pushgateway"], at["exporter"], at["alertmanager"]) < at["prometheus"]
    assert at["pushgateway"] < at["gc"] and at["webhook"] < at["alertmanager"]


def test_a_failed_services_last_line_is_read_whatever_bytes_its_log_holds(tmp_path: Path) -> None:
    """A log that is not UTF-8 (a binary's own output) still gives its last line, the bad
    bytes replaced, in the error that names the log."""
    state = StateDir.resolve(str(tmp_path / "s"))
    state.prepare()
    state.log_file("exporter").write_bytes(b"starting\nbad \xff\xfe bytes\n")
    said = up_mod._tail(state, "exporter")()
    assert said == f"bad \ufffd\ufffd bytes (log: {state.log_file('exporter')})"
