"""The chart's ``autoInstrumentation`` (issue 39): off, nothing; on, a MutatingAdmissionPolicy and
its binding with the selectors given, the library's own variable names, the release's
Pushgateway and the chart's image; bad selectors refused by the schema; and what the init
container copies exists where the image installs it and times a process as ``trainwatch run``
would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from setuptools import find_packages

from helm import auto_instrumentation as generated
from tests.test_helm import CHART, REPO, find, helm, one, run, template
from trial_instrumentation import names
from trial_instrumentation.auto import bundle

POLICY = "MutatingAdmissionPolicy"
BINDING = "MutatingAdmissionPolicyBinding"
ON = ("--set", "autoInstrumentation.enabled=true")


def docs(*args: str, release: str = "tw") -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(template(*args, release=release)) if d)


def expression(policy: dict[str, Any]) -> str:
    (mutation,) = policy["spec"]["mutations"]
    # JSONPatch: an ApplyConfiguration may not set atomic structs (env[].valueFrom.fieldRef).
    assert mutation["patchType"] == "JSONPatch"
    return str(mutation["jsonPatch"]["expression"])


def env_entries(expr: str) -> dict[str, str]:
    """name -> the rest of its env entry, for each ``Object.spec.containers.env{name: ...}``."""
    found = re.findall(r'Object\.spec\.containers\.env\{name: "([A-Z0-9_]+)", (.*)', expr)
    return dict(found)


def test_off_by_default_renders_no_policy() -> None:
    rendered = docs()
    assert not find(rendered, POLICY) and not find(rendered, BINDING)
    assert "trainwatch-auto" not in template()
    assert "autoInstrumentation.enabled=false" not in template()  # nothing says it, either


def test_on_renders_the_policy_with_the_librarys_names_pushgateway_and_image() -> None:
    rendered = docs(*ON)
    policy, binding = one(rendered, POLICY), one(rendered, BINDING)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore"  # a broken policy never keeps a pod from starting
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    # The default selects one labelled namespace, never all of them.
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"trainwatch.io/auto-instrumentation": "enabled"}}
    assert binding["spec"]["matchResources"]["objectSelector"] == {}

    expr = expression(policy)
    env = env_entries(expr)
    assert set(env) == {names.AUTO_ENV, names.ENV_PUSHGATEWAY, names.ENV_K8S_NAMESPACE,
                        names.ENV_K8S_POD, names.ENV_NODENAME, "PYTHONPATH"}
    assert env[names.AUTO_ENV].startswith('value: "1"')
    assert env[names.ENV_PUSHGATEWAY].startswith(
        'value: "http://tw-trainwatch-pushgateway.gpu-monitoring.svc:9091"')
    assert 'fieldPath: "metadata.namespace"' in env[names.ENV_K8S_NAMESPACE]
    assert 'fieldPath: "metadata.name"' in env[names.ENV_K8S_POD]
    assert 'fieldPath: "spec.nodeName"' in env[names.ENV_NODENAME]
    # PYTHONPATH: the auto site dir, then the copied packages, then what the container had.
    prefix = ":".join(bundle.pythonpath(generated.DEST))
    assert prefix == "/trainwatch/python/trial_instrumentation/auto/site:/trainwatch/python"
    # After the container's own PYTHONPATH (a literal, valueFrom or envFrom), which the kubelet
    # expands into $(PYTHONPATH); without one, the prefix alone.
    assert (f'c.?env.orValue([]).exists(x, x.name == "PYTHONPATH") || has(c.envFrom) ? '
            f'{json.dumps(prefix + ":$(PYTHONPATH)")} : {json.dumps(prefix)}') in expr
    # A variable the pod sets itself wins over the policy's.
    for name in set(env) - {"PYTHONPATH"}:
        assert f'.filter(c, !c.?env.orValue([]).exists(x, x.name == "{name}"))' in expr
    # Every container gets the mount, read-only; the lists are made where the pod has none.
    assert '"/volumeMounts/-"' in expr and '"/env/-"' in expr
    assert 'has(object.spec.volumes) ? [] : [JSONPatch{op: "add", path: "/spec/volumes", value: []}]' in expr

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    image = f'{values["gc"]["image"]["repository"]}:{chart["appVersion"]}'
    assert values["autoInstrumentation"]["image"]["repository"] == values["gc"]["image"]["repository"]
    assert f'image: "{image}"' in expr
    assert f'command: {json.dumps(["python3", "-m", "trial_instrumentation.auto.bundle", generated.DEST], separators=(",", ":"))}' in expr
    assert 'mountPath: "/trainwatch",\n' in expr and "readOnly: true" in expr
    assert 'capabilities: Object.spec.initContainers.securityContext.capabilities{drop: ["ALL"]}' in expr
    assert 'c.name == "trainwatch-auto"' in spec["matchConditions"][0]["expression"]


def test_values_move_selectors_url_image_and_api_version() -> None:
    rendered = docs(*ON, "--set", "autoInstrumentation.namespaceSelector.matchLabels.team=vision",
                    "--set-string", "autoInstrumentation.podSelector.matchLabels.trainwatch\\.io/timed=true",
                    "--set", "autoInstrumentation.pushgatewayUrl=http://pgw.elsewhere:9091",
                    "--set", "autoInstrumentation.image.tag=9.9.9",
                    "--set", "autoInstrumentation.apiVersion=admissionregistration.k8s.io/v1beta1",
                    release="prod")
    policy, binding = one(rendered, POLICY), one(rendered, BINDING)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1beta1"
    match = binding["spec"]["matchResources"]
    assert match["namespaceSelector"]["matchLabels"] == {
        "trainwatch.io/auto-instrumentation": "enabled", "team": "vision"}
    assert match["objectSelector"] == {"matchLabels": {"trainwatch.io/timed": "true"}}
    expr = expression(policy)
    assert env_entries(expr)[names.ENV_PUSHGATEWAY].startswith('value: "http://pgw.elsewhere:9091"')
    assert "pushgateway.gpu-monitoring" not in expr
    assert 'image: "ghcr.io/trainwatch/trainwatch:9.9.9"' in expr


def test_without_the_charts_pushgateway_the_url_must_be_given() -> None:
    result = helm("template", "tw", str(CHART), *ON, "--set", "pushgateway.enabled=false")
    assert result.returncode != 0
    assert "autoInstrumentation.pushgatewayUrl" in result.stderr


@pytest.mark.parametrize(("version", "kubernetes"), [
    ("v1", "1.36.0"), ("v1beta1", "1.34.0"), ("v1alpha1", "1.32.0")])
def test_policy_passes_the_api_schema_of_its_kubernetes(version: str, kubernetes: str,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "policy.yaml"
    out.write_text(template(*ON, "--set", f"autoInstrumentation.apiVersion=admissionregistration.k8s.io/{version}",
                            "--show-only", "templates/auto-instrumentation.yaml"))
    validator = shutil.which("kubernetes-validate", path=str(REPO / ".venv" / "bin"))
    assert validator, "kubernetes-validate is missing: make test installs it"
    result = run(validator, "--strict", "-k", kubernetes, str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == 2, result.stdout  # the policy and its binding


@pytest.mark.parametrize(("setting", "named"), [
    ("autoInstrumentation.namespaceSelector=null", "namespaceSelector is required"),
    ("autoInstrumentation.namespaceSelector.matchLabels=null",
     "autoInstrumentation.namespaceSelector"),
    ("autoInstrumentation.namespaceSelector.matchLabel.a=b", "autoInstrumentation.namespaceSelector"),
    ("autoInstrumentation.podSelector.matchLabels.a=not a label value!",
     "autoInstrumentation.podSelector.matchLabels.a"),
    (("autoInstrumentation.podSelector.matchExpressions[0].key=team,"
      "autoInstrumentation.podSelector.matchExpressions[0].operator=Within"),
     "autoInstrumentation.podSelector.matchExpressions.0.operator"),
    (("autoInstrumentation.podSelector.matchExpressions[0].key=team,"
      "autoInstrumentation.podSelector.matchExpressions[0].operator=In"),
     "autoInstrumentation.podSelector.matchExpressions.0"),
    ("autoInstrumentation.apiVersion=admissionregistration.k8s.io/v2",
     "autoInstrumentation.apiVersion"),
    ("autoInstrumentation.failurePolicy=Sometimes", "autoInstrumentation.failurePolicy"),
    ("autoInstrumentation.pushgatewayUrl=pgw:9091", "autoInstrumentation.pushgatewayUrl"),
    ("autoInstrumentation.enabeld=true", "autoInstrumentation"),
])
def test_schema_refuses_bad_selectors_and_values(setting: str, named: str) -> None:
    result = helm("template", "tw", str(CHART), *ON, "--set", setting)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


def test_schema_accepts_match_expressions() -> None:
    rendered = docs(*ON, "--set", "autoInstrumentation.podSelector.matchExpressions[0].key=team",
                    "--set", "autoInstrumentation.podSelector.matchExpressions[0].operator=Exists")
    selector = one(rendered, BINDING)["spec"]["matchResources"]["objectSelector"]
    assert selector == {"matchExpressions": [{"key": "team", "operator": "Exists"}]}


def test_generated_names_are_the_librarys() -> None:
    assert generated.main(["--check"]) == 0, "run `python3 -m helm.auto_instrumentation`"
    data = json.loads(generated.FILE.read_text())
    assert data["env"] == {"auto": names.AUTO_ENV, "pushgateway": names.ENV_PUSHGATEWAY,
                           "namespace": names.ENV_K8S_NAMESPACE, "pod": names.ENV_K8S_POD,
                           "nodename": names.ENV_NODENAME}
    assert set(data["env"].values()) <= {*names.TRIAL_ENV, *names.OTHER_ENV}
    assert data["pythonpath"].split(":")[0].endswith("/trial_instrumentation/auto/site")


def test_the_image_and_the_wheel_carry_what_is_copied() -> None:
    # In the repository (and so in the wheel: pyproject's packages include every
    # trial_instrumentation* package, auto.site among them).
    assert (REPO / bundle.SITE / "sitecustomize.py").is_file()
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    assert "trial_instrumentation.auto.site" in find_packages(str(REPO), include=include)
    # The init container's image (operator.Dockerfile): the package installed whole, beside the
    # project's dependencies (prometheus_client); python3 on PATH is that venv's.
    dockerfile = (REPO / "operator.Dockerfile").read_text()
    assert "COPY trial_instrumentation /tmp/src/trial_instrumentation" in dockerfile
    assert "PATH=/opt/trainwatch/bin:$PATH" in dockerfile
    assert "python3 -m venv /opt/trainwatch" in dockerfile
    assert "prometheus-client" in tomllib.loads((REPO / "pyproject.toml").read_text())[
        "project"]["dependencies"][0]
    assert "!trial_instrumentation/" in (REPO / ".dockerignore").read_text()


def test_the_init_containers_command_times_a_bare_interpreter(tmp_path: Path) -> None:
    """The command the policy gives the init container, run here into a folder standing in for
    the emptyDir; then a Python with no trainwatch installed, given only the policy's
    PYTHONPATH and TRAINWATCH_AUTO, loads trainwatch's sitecustomize from that folder."""
    data = json.loads(generated.FILE.read_text())
    dest = str(tmp_path / "python")
    argv = [sys.executable if a == "python3" else (dest if a == generated.DEST else a)
            for a in data["command"]]
    copied = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert copied.returncode == 0, copied.stderr
    for name in bundle.PACKAGES:
        assert (tmp_path / "python" / name / "__init__.py").is_file()
    assert not list((tmp_path / "python").rglob("__pycache__"))
    pythonpath = data["pythonpath"].replace(generated.DEST, dest)
    probe = ("import sys, trial_instrumentation, prometheus_client; "
             "print(sys.modules['sitecustomize'].__file__); print(type(sys.meta_path[0]).__name__); "
             "print(trial_instrumentation.__file__); print(prometheus_client.__file__)")
    # -S keeps out the host's site-packages (where this checkout may be installed): the copy
    # alone must serve; sitecustomize is imported by hand, as site.py would.
    bare = subprocess.run([sys.executable, "-S", "-c", "import sitecustomize; " + probe],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": pythonpath,
                               names.AUTO_ENV: "1"})
    assert bare.returncode == 0, bare.stderr
    site_file, watcher, lib, client = bare.stdout.split()
    assert site_file == f"{dest}/trial_instrumentation/auto/site/sitecustomize.py"
    assert watcher == "_Watch"
    assert lib.startswith(dest) and client.startswith(dest)


def test_in_the_trainwatch_image_the_init_container_serves_a_bare_training_image(
        tmp_path: Path) -> None:
    """operator.Dockerfile built by the real builder (podman, on the local Debian base, under a
    kept test tag: its cache makes a rebuild seconds); the init container's command run in it as
    the policy runs it (user 65534, read-only root, no capabilities, no network) into a folder
    standing in for the emptyDir; then the Debian base, which has no trainwatch, given the
    folder read-only and only the policy's variables, as another user: trainwatch's
    sitecustomize installs its import watcher and the copied packages import."""
    from tests.test_image import ENV, LOCAL_BASE_IMAGE, LOCKED_DOWN, OFFLINE, PODMAN, must
    assert PODMAN
    if subprocess.run([PODMAN, "image", "exists", LOCAL_BASE_IMAGE], env=ENV,
                      check=False).returncode != 0:
        pytest.fail(f"{LOCAL_BASE_IMAGE} is missing: run `make image-base` (make test does it)")
    image = f"localhost/trainwatch-operator-test:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    ca = "/etc/ssl/certs/ca-certificates.crt"
    mounts = ("-v", f"{ca}:{ca}:ro") if Path(ca).exists() else ()
    must("build", "-q", "--network", "host", *mounts, "--build-arg", f"BASE_IMAGE={LOCAL_BASE_IMAGE}",
         "-f", str(REPO / "operator.Dockerfile"), "-t", image, str(REPO), timeout=600)
    data = json.loads(generated.FILE.read_text())
    empty_dir = tmp_path / "emptydir"
    empty_dir.mkdir()
    empty_dir.chmod(0o777)  # as an emptyDir is
    volume = f"{empty_dir}:{data['mountPath']}"
    command = data["command"]
    must("run", "--rm", *LOCKED_DOWN, *OFFLINE, "-v", volume, "--entrypoint", command[0], image,
         *command[1:])
    probe = ("import sys, trial_instrumentation, prometheus_client; "
             "print(type(sys.meta_path[0]).__name__, trial_instrumentation.__file__, "
             "prometheus_client.__file__)")
    out = must("run", "--rm", "--read-only", "--user", "4242", "--cap-drop", "ALL", *OFFLINE,
               "-v", volume + ":ro", "-e", f"{names.AUTO_ENV}=1",
               "-e", f"PYTHONPATH={data['pythonpath']}", LOCAL_BASE_IMAGE, "python3", "-c", probe)
    assert out.split() == ["_Watch", f"{generated.DEST}/trial_instrumentation/__init__.py",
                           f"{generated.DEST}/prometheus_client/__init__.py"]
    # Without TRAINWATCH_AUTO the same PYTHONPATH loads nothing of trainwatch.
    off = must("run", "--rm", "--read-only", "--user", "4242", *OFFLINE, "-v", volume + ":ro",
               "-e", f"PYTHONPATH={data['pythonpath']}", LOCAL_BASE_IMAGE, "python3", "-c",
               "import sys; print(type(sys.meta_path[0]).__name__, "
               "sorted(m for m in sys.modules if m.startswith('trial_instrumentation')))")
    assert off.split(" ", 1)[0] != "_Watch" and off.endswith("[]"), off


def test_notes_say_how_to_turn_it_on_for_a_namespace(tmp_path: Path) -> None:
    from tests.test_helm_values import render_notes
    assert "Automatic instrumentation" not in render_notes(tmp_path)
    notes = render_notes(tmp_path, *ON, "--set-string",
                         "autoInstrumentation.podSelector.matchLabels.timed=yes")
    assert "MutatingAdmissionPolicy tw-trainwatch-auto-instrumentation, " \
           "admissionregistration.k8s.io/v1" in notes
    assert "kubectl label namespace NAMESPACE trainwatch.io/auto-instrumentation=enabled" in notes
    assert '(pods matching {"matchLabels":{"timed":"yes"}})' in notes
