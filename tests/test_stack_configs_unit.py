"""trainwatch.stack.configs over a fake checkout in tmp_path: the Prometheus and Alertmanager
files a stack runs with, derived from the project's, the digest that decides a reload, and the
rule rendering (its subprocess faked: the argv it gets, what a failure says)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwatch import layout
from trainwatch.alertmanager import AlertmanagerConfigError
from trainwatch.layout import StackError, StateDir
from trainwatch.stack import configs
from trainwatch.stack.settings import StackSettings

PORTS = {"exporter": 20910, "prometheus": 20911, "pushgateway": 20912, "alertmanager": 20913,
         "grafana": 20914, "webhook": 20919}

SHIPPED = {
    "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
    "rule_files": ["rules/*.yml"],
    "alerting": {"alert_relabel_configs": [{"action": "keep"}], "alertmanagers": [
        {"timeout": "7s", "static_configs": [{"targets": ["localhost:9093"]}],
         "dns_sd_configs": [{"names": ["am"]}]},
        {"static_configs": [{"targets": ["second:9093"]}]}]},
    "scrape_configs": [
        {"job_name": "trainwatch-exporter", "scrape_interval": "5s", "scrape_timeout": "4s",
         "static_configs": [{"targets": ["localhost:10910"]}]},
        {"job_name": "pushgateway", "honor_labels": True,
         "static_configs": [{"targets": ["localhost:9091"]}]},
        {"job_name": "alertmanager", "static_configs": [{"targets": ["localhost:9093"]}]},
        {"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]},
        {"job_name": "mine", "scrape_interval": "1m", "static_configs": [{"targets": ["x:1"]}]},
    ],
}


class Generator:
    """prometheus.generate_rules as subprocess.run sees it: writes one rule file, or fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Path]] = []
        self.returncode, self.stdout, self.stderr = 0, "", ""

    def __call__(self, argv: list[str], *, capture_output: bool, text: bool, check: bool,
                 cwd: Path) -> subprocess.CompletedProcess[str]:
        assert capture_output and text and not check
        self.calls.append((argv, cwd))
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if self.returncode == 0:
            (out / "trainwatch.yml").write_text("groups: []\n")
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, self.stderr)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    (root / "prometheus").mkdir(parents=True)
    (root / "prometheus" / "generate_rules.py").write_text("")
    (root / "prometheus" / "prometheus.yml").write_text(yaml.safe_dump(SHIPPED, sort_keys=False))
    monkeypatch.setattr(layout, "REPO", root)
    monkeypatch.setattr(configs, "REPO", root)
    return root


@pytest.fixture
def generator(monkeypatch: pytest.MonkeyPatch) -> Generator:
    fake = Generator()
    monkeypatch.setattr(configs.subprocess, "run", fake)
    return fake


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / "stack")


def test_write_if_changed_writes_only_new_text(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.yml"
    assert configs.write_if_changed(path, "one\n") and path.read_text() == "one\n"
    path.chmod(0o444)  # a write now would fail: unchanged text is not written
    assert not configs.write_if_changed(path, "one\n")
    path.chmod(0o644)
    assert configs.write_if_changed(path, "two\n") and path.read_text() == "two\n"
    assert configs.write_if_changed(path, "one\n") and path.read_text() == "one\n"  # sorts first
    assert configs.write_if_changed(path, "one\nmore\n") and path.read_text() == "one\nmore\n"


def _digest(config: Path, *files: Path) -> str:
    digest = hashlib.sha256(str(config).encode() + b"\0" + config.read_bytes())
    for path in files:
        digest.update(b"\0" + str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def test_the_digest_covers_the_file_and_every_rule_file_its_globs_match(tmp_path: Path) -> None:
    config = tmp_path / "p" / "prometheus.yml"
    rules = tmp_path / "p" / "rules"
    rules.mkdir(parents=True)
    (rules / "dir.yml").mkdir()  # matched, no file: not read
    for name in ("b.yml", "a.yml", ".hidden.yml", "other.txt"):
        (rules / name).write_text(f"{name}\n")
    absolute = tmp_path / "abs.yml"
    absolute.write_text("abs\n")
    config.write_text(yaml.safe_dump({"rule_files": ["rules/*.yml", str(absolute), 7]}))
    assert configs.loaded_digest(config) == _digest(
        config, rules / ".hidden.yml", rules / "a.yml", rules / "b.yml", absolute)
    before = configs.loaded_digest(config)
    (rules / "a.yml").write_text("changed\n")
    assert configs.loaded_digest(config) != before


def test_the_digest_covers_alertmanagers_templates(tmp_path: Path) -> None:
    config = tmp_path / "alertmanager.yml"
    (tmp_path / "t.tmpl").write_text("{{ define }}\n")
    config.write_text(yaml.safe_dump({"route": {}, "templates": ["*.tmpl"]}))
    assert configs.loaded_digest(config) == _digest(config, tmp_path / "t.tmpl")


@pytest.mark.parametrize("text", ["rule_files: [unclosed\n", "- a\n- b\n", "rule_files:\n",
                                  "just text\n", ""])
def test_the_digest_of_a_file_without_globs_is_its_own(tmp_path: Path, text: str) -> None:
    config = tmp_path / "prometheus.yml"
    (tmp_path / "x.yml").write_text("x")
    config.write_text(text)
    assert configs.loaded_digest(config) == _digest(config)


def test_the_same_text_at_another_path_is_another_digest(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("global: {}\n")
    (tmp_path / "b.yml").write_text("global: {}\n")
    assert configs.loaded_digest(tmp_path / "a.yml") != configs.loaded_digest(tmp_path / "b.yml")


def test_the_loaded_digest_is_kept_in_the_services_data(state: StateDir) -> None:
    assert configs.loaded_file(state, "alertmanager") == \
        state.root / "alertmanager" / "loaded-config.sha256"


def test_rules_are_rendered_into_the_state_with_the_stacks_runbook(
        repo: Path, generator: Generator, state: StateDir) -> None:
    out = state.data("prometheus") / "rules"
    out.mkdir(parents=True)
    (out / "retired.yml").write_text("old")
    (out / "keep.txt").write_text("not a rule file")
    glob = configs.rule_files(state, StackSettings(PORTS))
    assert glob == str(out / "*.yml")
    assert generator.calls == [([sys.executable, "-m", "prometheus.generate_rules", "--out",
                                 str(out), "--runbook-url", "http://127.0.0.1:20919/runbooks"],
                                repo)]
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "trainwatch.yml"]


def test_rules_get_for_and_rate_window_when_given(
        repo: Path, generator: Generator, state: StateDir) -> None:
    configs.rule_files(state, StackSettings(PORTS, for_="3m", runbook_url="https://rb"))
    configs.rule_files(state, StackSettings(PORTS, rate_window="7m"))
    assert [argv[5:] for argv, _ in generator.calls] == [
        ["--for", "3m", "--runbook-url", "https://rb"],
        ["--rate-window", "7m", "--runbook-url", "http://127.0.0.1:20919/runbooks"]]


@pytest.mark.parametrize("stdout, stderr, said", [
    ("out line\n", "first\nsecond\nValueError: bad --for\n", "ValueError: bad --for"),
    ("one\nlast of stdout\n", "  \n", "last of stdout"),
    ("", "", "no output"),
])
def test_a_failed_rendering_says_its_last_line(repo: Path, generator: Generator,
                                               state: StateDir, stdout: str, stderr: str,
                                               said: str) -> None:
    generator.returncode, generator.stdout, generator.stderr = 2, stdout, stderr
    with pytest.raises(StackError) as err:
        configs.rule_files(state, StackSettings(PORTS))
    assert str(err.value) == ("rendering rules with --for/--rate-window/--runbook-url failed: "
                              f"{said}")


def test_a_rendering_killed_by_a_signal_failed(repo: Path, generator: Generator,
                                               state: StateDir) -> None:
    generator.returncode, generator.stderr = -9, ""
    with pytest.raises(StackError, match="failed: no output$"):
        configs.rule_files(state, StackSettings(PORTS))


def test_rules_without_a_checkout_are_a_stack_error(tmp_path: Path, state: StateDir,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    generator: Generator) -> None:
    monkeypatch.setattr(layout, "REPO", tmp_path / "none")
    with pytest.raises(StackError, match="generate_rules.py not found"):
        configs.rule_files(state, StackSettings(PORTS))
    assert generator.calls == []


def _written(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def test_prometheus_gets_the_projects_config_aimed_at_the_stacks_ports(
        repo: Path, generator: Generator, state: StateDir) -> None:
    path = configs.prometheus_config(state, StackSettings(PORTS))
    assert path == state.root / "prometheus" / "prometheus.yml"
    source = repo / "prometheus" / "prometheus.yml"
    assert path.read_text().startswith(
        f"# Written by `trainwatch stack up` from {source}; rewritten at every up.\n")
    cfg = _written(path)
    targets = {job["job_name"]: job["static_configs"] for job in cfg["scrape_configs"]}
    assert targets == {"trainwatch-exporter": [{"targets": ["127.0.0.1:20910"]}],
                       "pushgateway": [{"targets": ["127.0.0.1:20912"]}],
                       "alertmanager": [{"targets": ["127.0.0.1:20913"]}],
                       "prometheus": [{"targets": ["127.0.0.1:20911"]}],
                       "mine": [{"targets": ["x:1"]}]}
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    assert jobs["trainwatch-exporter"]["scrape_interval"] == "5s"  # no --scrape-interval: kept
    assert jobs["mine"]["scrape_interval"] == "1m" and jobs["pushgateway"]["honor_labels"]
    assert cfg["global"] == SHIPPED["global"]
    assert cfg["rule_files"] == [str(state.root / "prometheus" / "rules" / "*.yml")]
    assert cfg["alerting"] == {"alert_relabel_configs": [{"action": "keep"}], "alertmanagers": [
        {"timeout": "7s", "static_configs": [{"targets": ["127.0.0.1:20913"]}]}]}
    assert list(cfg) == ["global", "rule_files", "alerting", "scrape_configs"]  # its order


def test_a_scrape_interval_sets_both_intervals_and_drops_every_jobs_own(
        repo: Path, generator: Generator, state: StateDir) -> None:
    cfg = _written(configs.prometheus_config(state, StackSettings(PORTS, scrape_interval="2s")))
    assert cfg["global"] == {"scrape_interval": "2s", "evaluation_interval": "2s"}
    for job in cfg["scrape_configs"]:
        assert "scrape_interval" not in job and "scrape_timeout" not in job, job


def test_a_scrape_interval_with_no_global_section_adds_one(
        repo: Path, generator: Generator, state: StateDir) -> None:
    shipped = {k: v for k, v in SHIPPED.items() if k != "global"}
    (repo / "prometheus" / "prometheus.yml").write_text(yaml.safe_dump(shipped))
    cfg = _written(configs.prometheus_config(state, StackSettings(PORTS, scrape_interval="3s")))
    assert cfg["global"] == {"scrape_interval": "3s", "evaluation_interval": "3s"}


@pytest.mark.parametrize("text", ["scrape_configs: [unclosed\n", "global: {}\n",
                                  "scrape_configs: 5\n", "scrape_configs:\n  - static_configs: []\n",
                                  "- a list\n"])
def test_a_config_without_readable_scrape_configs_is_refused(
        repo: Path, generator: Generator, state: StateDir, text: str) -> None:
    source = repo / "prometheus" / "prometheus.yml"
    source.write_text(text)
    with pytest.raises(StackError) as err:
        configs.prometheus_config(state, StackSettings(PORTS))
    assert str(err.value).startswith(f"{source}: cannot read its scrape_configs (")
    assert generator.calls == [] and not state.root.exists()


@pytest.mark.parametrize("jobs, named", [(["pushgateway"], "trainwatch-exporter"),
                                         (["trainwatch-exporter"], "pushgateway"),
                                         (["prometheus"], "trainwatch-exporter")])
def test_a_config_without_a_required_job_is_refused(
        repo: Path, generator: Generator, state: StateDir, jobs: list[str], named: str) -> None:
    source = repo / "prometheus" / "prometheus.yml"
    source.write_text(yaml.safe_dump({"scrape_configs": [
        {"job_name": job, "static_configs": []} for job in jobs]}))
    with pytest.raises(StackError) as err:
        configs.prometheus_config(state, StackSettings(PORTS))
    assert str(err.value) == f"{source}: scrape job {named!r} is missing"


@pytest.mark.parametrize("shipped", [None, {}, {"alertmanagers": []}, ["not", "a", "map"],
                                     {"alertmanagers": None, "alert_relabel_configs": []}])
def test_alerting_without_shipped_managers_is_the_stacks_alertmanager_alone(shipped: Any) -> None:
    assert configs._alerting(shipped, StackSettings(PORTS)) == {
        "alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:20913"]}]}]}


def test_alerting_keeps_the_first_managers_settings_without_its_discovery() -> None:
    shipped = {"alertmanagers": [{"scheme": "https", "path_prefix": "/am",
                                  "kubernetes_sd_configs": [{}], "file_sd_configs": [{}],
                                  "static_configs": [{"targets": ["a:1"]}]}]}
    assert configs._alerting(shipped, StackSettings(PORTS)) == {"alertmanagers": [
        {"scheme": "https", "path_prefix": "/am",
         "static_configs": [{"targets": ["127.0.0.1:20913"]}]}]}


def test_a_given_alertmanager_config_is_used_as_it_is(tmp_path: Path, state: StateDir) -> None:
    given = tmp_path / "mine.yml"
    given.write_text("route: {}\n")
    assert configs.alertmanager_config(state, StackSettings(PORTS, alertmanager_config=str(given))) \
        == given
    assert not state.root.exists()
    for missing in (tmp_path / "none.yml", tmp_path):
        with pytest.raises(StackError) as err:
            configs.alertmanager_config(state, StackSettings(PORTS, alertmanager_config=str(missing)))
        assert str(err.value) == f"--alertmanager-config: {missing} is not a file"


def test_the_shipped_alertmanager_config_notifies_the_stacks_webhook(
        repo: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = repo / configs.SHIPPED_ALERTMANAGER
    shipped.parent.mkdir(parents=True)
    shipped.write_text("route: {}\n")
    calls: list[tuple[Path, str]] = []

    def render(source: Path, *, webhook_url: str) -> dict[str, Any]:
        calls.append((source, webhook_url))
        return {"route": {"receiver": "r"}, "receivers": [{"name": "r"}]}

    monkeypatch.setattr(configs, "render_config", render)
    path = configs.alertmanager_config(state, StackSettings(PORTS))
    assert calls == [(shipped, "http://127.0.0.1:20919/alerts")]
    assert path == state.root / "alertmanager" / "alertmanager.yml"
    text = path.read_text()
    assert text.startswith(
        f"# Written by `trainwatch stack up` from {shipped}; rewritten at every up.\n")
    assert yaml.safe_load(text) == {"route": {"receiver": "r"}, "receivers": [{"name": "r"}]}
    assert text.index("route") < text.index("receivers")  # its order kept
    assert not (state.root / "alertmanager" / "fallback.yml").exists()


def test_a_shipped_alertmanager_config_that_cannot_be_rendered_is_a_stack_error(
        repo: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = repo / configs.SHIPPED_ALERTMANAGER
    shipped.parent.mkdir(parents=True)
    shipped.write_text("route: {}\n")

    def render(source: Path, *, webhook_url: str) -> dict[str, Any]:
        raise AlertmanagerConfigError("receiver 'x' is not defined")

    monkeypatch.setattr(configs, "render_config", render)
    with pytest.raises(StackError) as err:
        configs.alertmanager_config(state, StackSettings(PORTS))
    assert str(err.value) == "receiver 'x' is not defined"


def test_without_a_shipped_alertmanager_config_a_quiet_one_is_written(
        repo: Path, state: StateDir) -> None:
    path = configs.alertmanager_config(state, StackSettings(PORTS))
    assert path == state.root / "alertmanager" / "fallback.yml"
    text = path.read_text()
    assert yaml.safe_load(text) == {"route": {"receiver": "none", "group_by": ["alertname"]},
                                    "receivers": [{"name": "none"}]}
    assert text.startswith("route:")
    assert not (state.root / "alertmanager" / "alertmanager.yml").exists()
