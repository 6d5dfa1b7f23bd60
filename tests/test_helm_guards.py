"""Values that render and then break a pod or a job are refused by real `helm` with a line
naming the key (issue 37); the defaults and values at the edge still render. And the exporter's
config and TLS Secrets are mounted whole, so the kubelet's updates (a renewed certificate)
reach the exporter, which reloads them."""

from __future__ import annotations

import pytest
import yaml

from helm.exporter_schema import CPU_FLOOR_MILLICORES, EXPORTER_MEMORY_FLOOR
from tests.test_helm import CHART, helm, one, render
from tests.test_helm_values import pod_of
from trainwatch.gc import MIN_MAX_AGE

SCHEMA_SAYS = "values don't meet the specifications of the schema"
FLOOR_MI = EXPORTER_MEMORY_FLOOR // 2**20
SM = "kubePrometheusStack.serviceMonitor"


def rendered(*settings: str, lint: bool = False) -> tuple[int, str]:
    args = [a for s in settings for a in ("--set", s)]
    result = helm("lint", str(CHART), "--strict", *args) if lint else \
        helm("template", "tw", str(CHART), *args)
    return result.returncode, result.stderr + result.stdout


@pytest.mark.parametrize(("settings", "named", "by_schema"), [
    # A CPU limit below the kernel's smallest quota (1 ms per 100 ms): 1m, 9m, 0.005 cores.
    (["exporter.resources.limits.cpu=1m"], "exporter.resources.limits.cpu", True),
    (["gc.resources.limits.cpu=9m"], "gc.resources.limits.cpu", True),
    (["prometheus.resources.limits.cpu=0.005"], "prometheus.resources.limits.cpu", True),
    # Under the exporter's measured memory: 10Mi-16Mi rendered before, and so did 63Mi.
    (["exporter.resources.limits.memory=16Mi"], "exporter.resources.limits.memory", True),
    ([f"exporter.resources.limits.memory={FLOOR_MI - 1}Mi"],
     "exporter.resources.limits.memory", True),
    (["exporter.resources.limits.memory=0.06Gi"], "exporter.resources.limits.memory", True),
    ([f"exporter.resources.limits.memory={EXPORTER_MEMORY_FLOOR - 1}"],
     "exporter.resources.limits.memory", True),
    # gc refuses these, so the CronJob failed every run.
    ([f"gc.maxAge={MIN_MAX_AGE - 1:g}s"], "gc.maxAge", True),
    (["gc.maxAge=0.9m"], "gc.maxAge", True),
    (["gc.maxAge=0.01h"], "gc.maxAge", True),
    (["gc.maxAge=59"], "gc.maxAge", True),
    (["gc.endedAfter=0s"], "gc.endedAfter", True),
    (["gc.endedAfter=0"], "gc.endedAfter", True),
    (["gc.endedAfter=0.0m"], "gc.endedAfter", True),
    # Two values compared: the template's fail, naming both keys.
    (["exporter.resources.requests.memory=256Mi"], "exporter.resources.requests.memory", False),
    (["grafana.resources.requests.memory=1Gi", "grafana.resources.limits.memory=512Mi"],
     "grafana.resources.requests.memory", False),
    (["gc.resources.requests.cpu=1"], "gc.resources.requests.cpu", False),
    (["exporter.resources.requests.memory=300000000"],
     "exporter.resources.requests.memory", False),
    ([f"{SM}.scrapeTimeout=20s"], f"{SM}.scrapeTimeout", False),
    ([f"{SM}.interval=1m30s", f"{SM}.scrapeTimeout=1m31s"], f"{SM}.scrapeTimeout", False),
    # A subPath mount never sees the kubelet's update of a Secret (a renewed certificate).
    (["exporter.extraVolumeMounts[0].name=tls", "exporter.extraVolumeMounts[0].mountPath=/t",
      "exporter.extraVolumeMounts[0].subPath=tls.crt"], "exporter.extraVolumeMounts.0", True),
])
def test_values_that_break_pods_or_jobs_are_refused_naming_the_key(
        settings: list[str], named: str, by_schema: bool) -> None:
    code, output = rendered(*settings)  # as `helm install` and `upgrade` render
    assert code != 0 and named in output, output
    assert (SCHEMA_SAYS in output) is by_schema, output
    if not by_schema:  # the fail names the other key too, and says why
        assert ("limits" in output or "interval" in output) and "refuses" in output, output
    code, linted = rendered(*settings, lint=True)
    assert named in linted, linted
    # helm lint runs templates in its lint mode, where `fail` is reported, not fatal.
    assert code != 0 if by_schema else f"[INFO] Fail: {named}" in linted, linted


@pytest.mark.parametrize("settings", [
    [],  # the defaults
    [f"exporter.resources.limits.cpu={CPU_FLOOR_MILLICORES}m"],
    ["gc.resources.limits.cpu=0.01", "gc.resources.requests.cpu=10m"],
    ["exporter.resources.limits.cpu=2"],
    [f"exporter.resources.limits.memory={FLOOR_MI}Mi", f"exporter.resources.requests.memory={FLOOR_MI}Mi"],
    [f"exporter.resources.limits.memory={EXPORTER_MEMORY_FLOOR}"],
    ["exporter.resources.limits.memory=0.0625Gi"],
    ["exporter.resources.limits.memory=68M"],
    ["prometheus.resources.limits.memory=20Mi", "prometheus.resources.requests.memory=20Mi"],
    ["grafana.resources.requests.memory=1.5Gi", "grafana.resources.limits.memory=1536Mi"],
    [f"gc.maxAge={MIN_MAX_AGE:g}s"],
    ["gc.maxAge=1m"],
    ["gc.maxAge=0.02h"],
    ["gc.maxAge=1.5m"],
    ["gc.endedAfter=1s"],
    ["gc.endedAfter=0.5m"],
    [f"{SM}.scrapeTimeout=15s"],  # equal to the interval
    [f"{SM}.interval=1m30s", f"{SM}.scrapeTimeout=1m30s"],
    [f"{SM}.interval=", f"{SM}.scrapeTimeout=20s"],  # the operator's default interval
    ["exporter.extraVolumeMounts[0].name=tls", "exporter.extraVolumeMounts[0].mountPath=/t"],
])
def test_defaults_and_values_at_the_edge_still_render(settings: list[str]) -> None:
    for lint in (False, True):
        code, output = rendered(*settings, lint=lint)
        assert code == 0, output


def test_the_exporters_secrets_are_mounted_whole_so_renewals_reach_it() -> None:
    """ci/gpu-node-values.yaml: the config Secret and a cert-manager TLS Secret."""
    docs = render("gpu-node")
    pod = pod_of(one(docs, "DaemonSet", "-exporter"))
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {"config", "tls"} <= set(mounts)
    for name in ("config", "tls"):
        assert "secret" in volumes[name]
        assert "subPath" not in mounts[name] and "subPathExpr" not in mounts[name]
    assert mounts["tls"]["mountPath"] == "/etc/trainwatch/tls"
    assert "--config=/etc/trainwatch/exporter.yml" in pod["containers"][0]["args"]
    # The config volume is the Secret the chart renders (its exporter.yml is what --config
    # reads), the TLS one the values' cert-manager Secret, and the files the config names lie
    # in that mount.
    secret = one(docs, "Secret", "-exporter")
    assert volumes["config"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert f"{mounts['config']['mountPath']}/exporter.yml" == "/etc/trainwatch/exporter.yml"
    values = yaml.safe_load((CHART / "ci" / "gpu-node-values.yaml").read_text())["exporter"]
    [tls] = [v for v in values["extraVolumes"] if v["name"] == "tls"]
    assert volumes["tls"] == tls
    web = yaml.safe_load(secret["stringData"]["exporter.yml"])["web"]
    assert {web["tls_cert_file"].rsplit("/", 1)[0], web["tls_key_file"].rsplit("/", 1)[0]} == \
        {mounts["tls"]["mountPath"]}


def test_the_floor_patterns_agree_with_exact_arithmetic() -> None:
    """Each generated pattern, against the value of the text it reads, exactly (Fraction)."""
    import doctest
    import random
    import re
    from fractions import Fraction

    import helm.schema_bounds as bounds
    from helm.exporter_schema import GC_UNITS

    assert doctest.testmod(bounds).failed == 0
    rng = random.Random(37)
    for floor, units in [(EXPORTER_MEMORY_FLOOR, bounds.MEMORY_UNITS), (10**7, bounds.MEMORY_UNITS),
                         (CPU_FLOOR_MILLICORES, bounds.CPU_UNITS), (MIN_MAX_AGE, GC_UNITS)]:
        pattern = re.compile(bounds.quantity_at_least(floor, units))
        for _ in range(3000):
            unit = rng.choice(sorted(units))
            scale = Fraction(floor) / Fraction(units[unit])
            number = Fraction(rng.randint(0, 4000), 1000) * scale * rng.choice((1, 1, 10, 100))
            text = f"{float(number):.{rng.randint(0, 4)}f}".rstrip(".")
            exact = Fraction(text) * Fraction(units[unit]) >= floor
            # A floor that is no whole number of the unit is rounded up to PLACES decimals.
            near = abs(Fraction(text) - scale) < Fraction(1, 10**bounds.PLACES)
            assert bool(pattern.match(text + unit)) == exact or near, (floor, text + unit)
