"""trainwatch.stack.services without starting anything: each service's command line,
environment and files for given settings, with the binaries found on a faked PATH and the
configuration writers faked (their own tests: test_stack_configs_unit.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from trainwatch.layout import REPO, StackError, StateDir
from trainwatch.stack import services
from trainwatch.stack.services import ServiceSpec, build
from trainwatch.stack.settings import GC_EVERY, StackSettings

PORTS = {"exporter": 20910, "prometheus": 20911, "pushgateway": 20912, "alertmanager": 20913,
         "grafana": 20914, "webhook": 20919}
BINARIES = {"prometheus": "/opt/bin/prometheus",
            "prometheus-pushgateway": "/opt/bin/prometheus-pushgateway",
            "prometheus-alertmanager": "/opt/bin/prometheus-alertmanager"}


@pytest.fixture
def path(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The binaries on PATH (edit it in a test); nothing else is."""
    found = dict(BINARIES)
    monkeypatch.setattr(services.shutil, "which", lambda name: found.get(name))
    return found


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateDir:
    found = StateDir(tmp_path / "stack")
    monkeypatch.setattr(services.configs, "alertmanager_config",
                        lambda st, settings: st.root / f"am-{settings.ports['webhook']}.yml")
    monkeypatch.setattr(services.configs, "prometheus_config",
                        lambda st, settings: st.root / f"prom-{settings.ports['exporter']}.yml")
    return found


def test_every_binary_present_is_no_error(path: dict[str, str]) -> None:
    services.require_binaries()
    assert services.binary("prometheus-alertmanager") == "/opt/bin/prometheus-alertmanager"


def test_missing_binaries_are_named_in_one_line_with_their_packages(path: dict[str, str]) -> None:
    del path["prometheus-alertmanager"], path["prometheus"]
    with pytest.raises(StackError) as err:
        services.require_binaries()
    assert str(err.value) == ("prometheus, prometheus-alertmanager not installed: run `make "
                              "tools` or `sudo apt-get install prometheus "
                              "prometheus-alertmanager`, then `trainwatch stack up` again")
    path.clear()
    with pytest.raises(StackError) as err:
        services.binary("prometheus-pushgateway")
    assert str(err.value).startswith(
        "prometheus, prometheus-pushgateway, prometheus-alertmanager not installed: run `make "
        "tools` or `sudo apt-get install prometheus prometheus-alertmanager "
        "prometheus-pushgateway`, then")


def test_the_exporter_is_this_interpreters_on_its_port(path: dict[str, str], state: StateDir) -> None:
    spec = build("exporter", state, StackSettings(PORTS))
    assert spec == ServiceSpec("exporter", (sys.executable, "-m", "exporter",
                                            "--web.listen-address=127.0.0.1:20910"),
                               "/metrics", env={"PYTHONPATH": str(REPO)})
    assert spec.cwd == REPO and not spec.optional and spec.ready_path == "/healthz"
    assert state.data("exporter").is_dir()


def test_the_pushgateway_persists_into_its_data(path: dict[str, str], state: StateDir) -> None:
    spec = build("pushgateway", state, StackSettings(PORTS))
    assert spec == ServiceSpec("pushgateway", (
        "/opt/bin/prometheus-pushgateway", "--web.listen-address=127.0.0.1:20912",
        f"--persistence.file={state.root / 'pushgateway' / 'metrics.store'}"))
    assert spec.ready_path == "/-/ready" and spec.config is None and spec.env == {}


def test_alertmanager_runs_its_config_without_a_cluster_port(
        path: dict[str, str], state: StateDir) -> None:
    settings = StackSettings(PORTS, alertmanager_external_url="https://am.example/x")
    spec = build("alertmanager", state, settings)
    config = state.root / "am-20919.yml"
    assert spec == ServiceSpec("alertmanager", (
        "/opt/bin/prometheus-alertmanager", f"--config.file={config}",
        f"--storage.path={state.root / 'alertmanager' / 'data'}",
        "--web.listen-address=127.0.0.1:20913", "--cluster.listen-address=",
        "--web.external-url=https://am.example/x", "--web.route-prefix=/"), config=config)


def test_prometheus_runs_its_config_with_reloads_enabled(path: dict[str, str], state: StateDir) -> None:
    spec = build("prometheus", state, StackSettings(PORTS))
    config = state.root / "prom-20910.yml"
    assert spec == ServiceSpec("prometheus", (
        "/opt/bin/prometheus", f"--config.file={config}",
        f"--storage.tsdb.path={state.root / 'prometheus' / 'data'}",
        "--web.listen-address=127.0.0.1:20911", "--web.enable-lifecycle",
        "--web.external-url=http://127.0.0.1:20911", "--web.route-prefix=/"), config=config)
    assert spec.ready_path == "/-/ready"


def test_a_missing_binary_stops_its_service(path: dict[str, str], state: StateDir) -> None:
    del path["prometheus"]
    with pytest.raises(StackError, match="^prometheus not installed"):
        build("prometheus", state, StackSettings(PORTS))


def test_the_webhook_records_into_the_state_and_serves_the_runbooks(
        path: dict[str, str], state: StateDir) -> None:
    spec = build("webhook", state, StackSettings(PORTS))
    assert spec == ServiceSpec("webhook", (
        sys.executable, "-m", "trainwatch.webhook", "--web.listen-address=127.0.0.1:20919",
        f"--record={state.root / 'webhook' / 'notifications.jsonl'}",
        f"--runbooks={REPO / 'docs' / 'runbooks.md'}"), env={"PYTHONPATH": str(REPO)})
    assert services.notifications_file(state) == state.root / "webhook" / "notifications.jsonl"


@pytest.mark.parametrize("name", ["postgres", "aaa", "zookeeper", "alertmanagers", ""])
def test_an_unknown_service_is_a_value_error(path: dict[str, str], state: StateDir,
                                             name: str) -> None:
    with pytest.raises(ValueError, match=f"^unknown service '{name}'$"):
        build(name, state, StackSettings(PORTS))


def test_a_name_made_at_run_time_is_the_same_service(path: dict[str, str], state: StateDir,
                                                    tmp_path: Path) -> None:
    path["grafana"] = str(_install(tmp_path / "g", "grafana"))
    for name in ("exporter", "pushgateway", "alertmanager", "prometheus", "grafana", "gc",
                 "webhook"):
        made = "".join(list(name))  # equal, not the same object as the literal
        assert build(made, state, StackSettings(PORTS)) == build(name, state, StackSettings(PORTS))


def test_gc_runs_every_default_interval_against_the_stacks_pushgateway(
        path: dict[str, str], state: StateDir) -> None:
    spec = build("gc", state, StackSettings(PORTS))
    status = state.root / "gc" / "last-pass.json"
    assert spec == ServiceSpec("gc", (
        sys.executable, "-m", "trainwatch.stack.gc_loop", f"--every={GC_EVERY}",
        f"--status={status}", "--", "--pushgateway=http://127.0.0.1:20912"),
        env={"PYTHONPATH": str(REPO)}, status_file=status, summary=f"`trainwatch gc` every {GC_EVERY}")
    assert services.gc_status_file(state) == status


def test_gc_passes_its_given_flags_through(path: dict[str, str], state: StateDir) -> None:
    spec = build("gc", state, StackSettings(PORTS, gc_every="45s", gc_ended_after="7m",
                                            gc_max_age="3h"))
    assert spec is not None
    assert spec.argv[3] == "--every=45s" and spec.summary == "`trainwatch gc` every 45s"
    assert spec.argv[5:] == ("--", "--pushgateway=http://127.0.0.1:20912", "--ended-after=7m",
                             "--max-age=3h")
    only = build("gc", state, StackSettings(PORTS, gc_max_age="2d"))
    assert only is not None and only.argv[-1] == "--max-age=2d" and only.argv[-2].startswith("--push")


@pytest.mark.parametrize("field, flag", [("gc_every", "every"), ("gc_ended_after", "ended-after"),
                                         ("gc_max_age", "max-age")])
def test_a_gc_setting_that_is_no_duration_is_refused(
        path: dict[str, str], state: StateDir, field: str, flag: str) -> None:
    with pytest.raises(StackError) as err:
        build("gc", state, StackSettings(PORTS, **{field: "soon"}))  # type: ignore[arg-type]
    assert str(err.value).startswith(f"--gc-{flag}: ") and "'soon'" in str(err.value)


def test_no_grafana_on_path_is_no_grafana(path: dict[str, str], state: StateDir) -> None:
    assert build("grafana", state, StackSettings(PORTS)) is None


def _install(root: Path, name: str) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "defaults.ini").write_text("")
    (root / "bin").mkdir()
    exe = root / "bin" / name
    exe.write_text("")
    return exe


@pytest.mark.parametrize("name, verb", [("grafana-server", ()), ("grafana", ("server",))])
def test_grafana_runs_from_its_home_on_loopback_with_the_projects_provisioning(
        path: dict[str, str], state: StateDir, tmp_path: Path, name: str,
        verb: tuple[str, ...]) -> None:
    home = tmp_path / "grafana-11"
    exe = _install(home, name)
    link = tmp_path / "bin" / name  # found on PATH through a link, as /usr/sbin has it
    link.parent.mkdir()
    link.symlink_to(exe)
    path[name] = str(link)
    spec = build("grafana", state, StackSettings(PORTS))
    data = state.root / "grafana"
    assert spec == ServiceSpec("grafana", (str(link), *verb, "--homepath", str(home)), env={
        "GF_SERVER_HTTP_ADDR": "127.0.0.1", "GF_SERVER_HTTP_PORT": "20914",
        "GF_PATHS_DATA": str(data / "data"), "GF_PATHS_LOGS": str(data / "logs"),
        "GF_PATHS_PLUGINS": str(data / "plugins"),
        "GF_PATHS_PROVISIONING": str(data / "provisioning"),
        "GF_AUTH_ANONYMOUS_ENABLED": "true", "PROMETHEUS_URL": "http://127.0.0.1:20911"},
        cwd=home, optional=True)
    assert spec.ready_path == "/api/health"


def test_grafana_server_is_preferred_to_grafana(path: dict[str, str], state: StateDir,
                                                 tmp_path: Path) -> None:
    path["grafana-server"] = str(_install(tmp_path / "a", "grafana-server"))
    path["grafana"] = str(_install(tmp_path / "b", "grafana"))
    spec = build("grafana", state, StackSettings(PORTS))
    assert spec is not None and spec.argv[0] == path["grafana-server"]


def test_grafanas_home_falls_back_to_the_debian_one(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "loose" / "grafana"
    exe.parent.mkdir()
    exe.write_text("")
    debian = tmp_path / "usr-share-grafana"
    real = services.Path

    def fake_path(name: str | Path) -> Path:
        return debian if str(name) == "/usr/share/grafana" else real(name)

    monkeypatch.setattr(services, "Path", fake_path)
    with pytest.raises(StackError) as err:
        services._grafana_home(exe)
    assert str(err.value) == (f"{exe}: no conf/defaults.ini beside it or in /usr/share/grafana; "
                              "reinstall Grafana from its Debian package or tarball")
    (debian / "conf").mkdir(parents=True)
    (debian / "conf" / "defaults.ini").write_text("")
    assert services._grafana_home(exe) == debian
    (debian / "conf" / "defaults.ini").unlink()
    (debian / "conf" / "defaults.ini").mkdir()  # no file: no home
    with pytest.raises(StackError):
        services._grafana_home(exe)


def test_grafana_provisioning_points_the_dashboards_at_this_checkout(tmp_path: Path) -> None:
    out = services.grafana_provisioning(tmp_path)
    assert out == tmp_path / "provisioning"
    source = REPO / "grafana" / "provisioning"
    assert (out / "datasources" / "trainwatch.yaml").read_text() == \
        (source / "datasources" / "trainwatch.yaml").read_text()
    written = (out / "dashboards" / "trainwatch.yaml").read_text()
    shipped = yaml.safe_load((source / "dashboards" / "trainwatch.yaml").read_text())
    for provider in shipped["providers"]:
        provider["options"]["path"] = str(REPO / "grafana" / "dashboards")
    assert yaml.safe_load(written) == shipped
    assert written.startswith("apiVersion: 1\n")  # the shipped order kept
    assert written.index("name: trainwatch") < written.index("allowUiUpdates")


def test_a_spec_is_a_value(path: dict[str, str], state: StateDir) -> None:
    spec = build("pushgateway", state, StackSettings(PORTS))
    assert spec is not None
    with pytest.raises(AttributeError):
        spec.optional = True  # type: ignore[misc]
