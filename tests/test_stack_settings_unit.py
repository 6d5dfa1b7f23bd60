"""trainwatch.stack.settings: a stack's URLs, its stack.json (written, read back, read when
old, broken or foreign), and the checks that refuse a setting before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import DEFAULT_LISTEN_ADDRESS
from trainwatch.layout import StackError
from trainwatch.stack.settings import (
    DEFAULT_PORTS,
    GC_EVERY,
    PROCESSES,
    SERVICES,
    StackSettings,
    check,
    check_ports,
)
from trial_instrumentation.durations import is_prometheus_duration

REPO = Path(__file__).resolve().parent.parent
PORTS = {"exporter": 20910, "prometheus": 20911, "pushgateway": 20912, "alertmanager": 20913,
         "grafana": 20914, "webhook": 20919}


def test_the_default_ports_are_the_documented_ones() -> None:
    readme = " ".join(REPO.joinpath("README.md").read_text().split())
    for phrase in (f"exporter (:{DEFAULT_PORTS['exporter']})",
                   f"rules (:{DEFAULT_PORTS['prometheus']})",
                   f"Pushgateway (:{DEFAULT_PORTS['pushgateway']})",
                   f"Alertmanager (:{DEFAULT_PORTS['alertmanager']})",
                   f"notifies (:{DEFAULT_PORTS['webhook']};",
                   f"dashboards (:{DEFAULT_PORTS['grafana']})"):
        assert phrase in readme, phrase
    assert DEFAULT_LISTEN_ADDRESS == f":{DEFAULT_PORTS['exporter']}"
    assert SERVICES == tuple(DEFAULT_PORTS) and PROCESSES == (*SERVICES, "gc")
    assert is_prometheus_duration(GC_EVERY)


def test_urls_are_on_loopback_at_each_services_port() -> None:
    settings = StackSettings(PORTS)
    assert settings.url("alertmanager") == "http://127.0.0.1:20913"
    assert settings.runbook() == "http://127.0.0.1:20919/runbooks"
    assert settings.external_url("prometheus") == "http://127.0.0.1:20911"
    assert settings.external_url("alertmanager") == "http://127.0.0.1:20913"
    assert settings.external_url("grafana") == "http://127.0.0.1:20914"


def test_given_urls_replace_only_their_own() -> None:
    settings = StackSettings(PORTS, runbook_url="https://wiki/rb",
                             prometheus_external_url="https://prom.example/",
                             alertmanager_external_url="https://am.example/")
    assert settings.runbook() == "https://wiki/rb"
    assert settings.external_url("prometheus") == "https://prom.example/"
    assert settings.external_url("alertmanager") == "https://am.example/"
    assert settings.external_url("grafana") == "http://127.0.0.1:20914"
    only = StackSettings(PORTS, alertmanager_external_url="https://am.example/")
    assert only.external_url("prometheus") == "http://127.0.0.1:20911"


def test_saved_settings_load_back_whole(tmp_path: Path) -> None:
    settings = StackSettings(PORTS, for_="2m", rate_window="3m", scrape_interval="7s",
                             alertmanager_config="/am.yml", runbook_url="https://rb",
                             prometheus_external_url="https://p/", alertmanager_external_url="https://a/",
                             gc_every="45s", gc_ended_after="11m", gc_max_age="3d")
    path = tmp_path / "stack.json"
    settings.save(path)
    text = path.read_text()
    assert text.startswith('{\n  "ports": {\n    "exporter": 20910,') and text.endswith("}\n")
    assert StackSettings.load(path) == settings


def test_an_old_file_gets_defaults_for_what_it_lacks_and_unknown_keys_are_ignored(
        tmp_path: Path) -> None:
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"ports": {"prometheus": "20911", "exporter": 20910},
                                "for_": "4m", "retired_setting": 1}))
    assert StackSettings.load(path) == StackSettings(
        {**DEFAULT_PORTS, "prometheus": 20911, "exporter": 20910}, for_="4m")


@pytest.mark.parametrize("text", [
    "{not json", "[]", '"ports"', "{}", '{"ports": {"prometheus": "high"}}',
    '{"ports": {"prometheus": null}}', '{"ports": 5}', '{"ports": []}',
])
def test_a_file_that_cannot_be_read_is_none(tmp_path: Path, text: str) -> None:
    path = tmp_path / "stack.json"
    path.write_text(text)
    assert StackSettings.load(path) is None


def test_no_file_is_none(tmp_path: Path) -> None:
    assert StackSettings.load(tmp_path / "stack.json") is None


def test_check_passes_the_defaults_and_good_values() -> None:
    check(StackSettings(dict(DEFAULT_PORTS)))
    check(StackSettings(PORTS, for_="1m30s", rate_window="5m", scrape_interval="15s",
                        prometheus_external_url="https://prom.example:8443/x/y",
                        alertmanager_external_url="http://am"))


@pytest.mark.parametrize("url", ["ftp://prom/", "prom.example", "http://", "http:///x",
                                 "http://a b/", "http://host/a b", " http://host/",
                                 "http://host/\n"])
def test_check_refuses_an_external_url_that_is_no_http_url(url: str) -> None:
    for service in ("prometheus", "alertmanager"):
        with pytest.raises(StackError) as err:
            check(StackSettings(PORTS, **{f"{service}_external_url": url}))  # type: ignore[arg-type]
        assert str(err.value) == (f"--{service}-external-url: {url!r} is not an http(s) URL "
                                  "like http://host:port/")


def test_check_names_prometheus_first_when_both_urls_are_bad() -> None:
    with pytest.raises(StackError, match="^--prometheus-external-url"):
        check(StackSettings(PORTS, prometheus_external_url="x", alertmanager_external_url="y"))


@pytest.mark.parametrize("field, flag", [("scrape_interval", "--scrape-interval"),
                                         ("for_", "--for"), ("rate_window", "--rate-window")])
@pytest.mark.parametrize("value", ["0s", "5", "1.5m", "-1m", ""])
def test_check_refuses_a_duration_prometheus_cannot_read(field: str, flag: str, value: str) -> None:
    with pytest.raises(StackError) as err:
        check(StackSettings(PORTS, **{field: value}))  # type: ignore[arg-type]
    assert str(err.value) == (f"{flag}: {value!r} is not a Prometheus duration above 0 "
                              f"(e.g. {flag} 30s, 1m, 1m30s)")


def test_check_names_the_first_bad_duration_and_checks_ports_first() -> None:
    with pytest.raises(StackError, match="^--scrape-interval"):
        check(StackSettings(PORTS, for_="x", rate_window="y", scrape_interval="z"))
    with pytest.raises(StackError, match="^--for:"):
        check(StackSettings(PORTS, for_="x", rate_window="y"))
    with pytest.raises(StackError, match="^--grafana-port"):
        check(StackSettings({**PORTS, "grafana": 0}, for_="x", prometheus_external_url="y"))


@pytest.mark.parametrize("port", [1, 2, 65534, 65535])
def test_every_tcp_port_is_accepted(port: int) -> None:
    check_ports({"prometheus": port})


@pytest.mark.parametrize("port", [0, -1, 65536, 70000])
def test_a_number_outside_the_tcp_ports_is_refused(port: int) -> None:
    with pytest.raises(StackError) as err:
        check_ports({"exporter": 20910, "webhook": port})
    assert str(err.value) == f"--webhook-port: {port} is not a TCP port (1-65535)"


def test_two_services_on_one_port_are_named_later_one_first() -> None:
    with pytest.raises(StackError) as err:
        check_ports({"exporter": 20910, "prometheus": 20911, "grafana": 20910})
    assert str(err.value) == ("--grafana-port and --exporter-port are both 20910: "
                              "give each service its own port")


def test_a_bad_port_is_named_before_a_shared_one() -> None:
    with pytest.raises(StackError, match="^--webhook-port: 0 "):
        check_ports({"exporter": 20910, "grafana": 20910, "webhook": 0})


def test_settings_are_not_changed_in_place() -> None:
    settings = StackSettings(PORTS)
    with pytest.raises(AttributeError):
        settings.for_ = "1m"  # type: ignore[misc]
    assert settings.for_ is None


def test_every_service_has_its_own_readiness_path() -> None:
    from trainwatch.stack.settings import READY_PATHS
    assert tuple(READY_PATHS) == SERVICES  # one each, in the services' order
    assert READY_PATHS["exporter"] == "/healthz"  # exporter/web.py's health endpoint
    assert READY_PATHS["grafana"] == "/api/health"  # Grafana's health API
    # Prometheus's, the Pushgateway's and Alertmanager's documented readiness endpoint, and the
    # webhook receiver's, which answers it the same way.
    assert {s for s, path in READY_PATHS.items() if path == "/-/ready"} == {
        "prometheus", "pushgateway", "alertmanager", "webhook"}
