"""prometheus/prometheus-slurm.yml, the scrape config for Slurm nodes: promtool accepts it (and
its file_sd targets file), it scrapes the jobs the rules' and dashboards' selectors name, as
prometheus.yml does, and live, a real Prometheus finds a real exporter through its file_sd
file, and drops it when the file no longer lists it, without a reload."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from benchmarks.stack import (
    REPO,
    promtool,
    require_binary,
    start_prometheus,
    start_pushgateway,
    start_trainwatch_exporter,
    wait_until,
)
from exporter.config import DEFAULT_LISTEN_ADDRESS, parse_listen_address
from prometheus import generate_rules

PROM_DIR = REPO / "prometheus"
CONFIG = PROM_DIR / "prometheus-slurm.yml"
BASE = PROM_DIR / "prometheus.yml"
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def jobs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in config["scrape_configs"]}


def selected_job(selector: str) -> str:
    match = re.fullmatch(r'job="([^"]+)"', selector)
    assert match, selector
    return match.group(1)


SELECTORS = generate_rules.load_settings().selectors
EXPORTER_JOB = selected_job(SELECTORS["exporter"])
EXPORTER_PORT = parse_listen_address(DEFAULT_LISTEN_ADDRESS)[1]
TRIAL_JOB = selected_job(SELECTORS["trial"])


def test_promtool_check_config_accepts_it_with_every_rule_file_and_its_targets_file() -> None:
    out = promtool("check", "config", CONFIG).stdout
    rule_files = len(list((PROM_DIR / "rules").glob("*.yml")))
    assert f"SUCCESS: {rule_files} rule files found" in out
    assert "WARNING" not in out  # the file_sd file it names is there


def test_promtool_refuses_a_broken_targets_file(tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path)
    shutil.copytree(PROM_DIR / "rules", tmp_path / "rules")
    [files] = jobs(load(CONFIG))[EXPORTER_JOB]["file_sd_configs"]
    (tmp_path / files["files"][0]).write_text("- targets: 10910\n")
    proc = subprocess.run([require_binary("promtool"), "check", "config",
                           str(tmp_path / CONFIG.name)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode != 0 and "checking SD file" in proc.stdout + proc.stderr


def test_it_scrapes_the_jobs_the_rules_and_dashboards_select_as_prometheus_yml_does() -> None:
    slurm, base = load(CONFIG), load(BASE)
    assert set(jobs(slurm)) == set(jobs(base))
    assert (slurm["rule_files"], slurm["alerting"]) == (base["rule_files"], base["alerting"])
    exporter = jobs(slurm)[EXPORTER_JOB]
    assert set(exporter) >= {"file_sd_configs", "dns_sd_configs"}
    [dns] = exporter["dns_sd_configs"]
    # The exporter's own default port: a node found by name is scraped where it listens.
    assert dns["type"] == "A" and dns["port"] == EXPORTER_PORT
    # The trial's series keep the job they were pushed with: the trial selector's.
    gateway = [j for j in jobs(slurm).values() if j.get("honor_labels")]
    assert [j["job_name"] for j in gateway] == [j["job_name"] for j in jobs(base).values()
                                                if j.get("honor_labels")]
    # Every job a dashboard or a rule selects is the exporter's job or the pushed trials'.
    texts = [p.read_text() for p in [*DASHBOARDS, *(PROM_DIR / "rules").glob("*.yml")]]
    selected = {m for text in texts for m in re.findall(r'job=\\?"([^"\\]+)\\?"', text)}
    assert EXPORTER_JOB in selected and selected <= {EXPORTER_JOB, TRIAL_JOB}, selected


def write_targets(path: Path, targets: list[str]) -> None:
    """As the documented cron line does: a whole new file renamed over the old one."""
    new = path.with_suffix(".new")
    new.write_text(yaml.safe_dump([{"targets": targets}] if targets else []))
    new.replace(path)


def test_live_prometheus_finds_the_exporter_through_its_file_sd_file(tmp_path: Path) -> None:
    config = load(CONFIG)
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(PROM_DIR / "rules" / "*.yml")]
    config.pop("alerting")
    exporter_job = jobs(config)[EXPORTER_JOB]
    exporter_job.pop("dns_sd_configs")  # example.org resolves nowhere here
    [file_sd] = exporter_job["file_sd_configs"]
    targets = tmp_path / file_sd["files"][0]  # relative: beside the config Prometheus reads
    with start_trainwatch_exporter(tmp_path, fake_gpus=1) as exporter, \
            start_pushgateway(tmp_path) as gateway:
        write_targets(targets, [exporter.instance])
        [static] = jobs(config)["pushgateway"]["static_configs"]
        static["targets"] = [gateway.instance]
        with start_prometheus(tmp_path, config) as prom:
            [host] = prom.wait_for_series(f'trainwatch_host_info{{{SELECTORS["exporter"]}}}')
            assert host["metric"]["instance"] == exporter.instance
            prom.wait_for_series(f'trainwatch_gpu_info{{{SELECTORS["exporter"]}}}')
            prom.wait_for_series('up{job="pushgateway"} == 1')

            def scraped() -> set[str]:
                return {t["labels"]["instance"] for t in prom.targets()
                        if t["labels"]["job"] == EXPORTER_JOB}

            assert scraped() == {exporter.instance}
            write_targets(targets, [])  # the node left the cluster
            wait_until(lambda: scraped() == set(), timeout=20, what="the target dropped")
