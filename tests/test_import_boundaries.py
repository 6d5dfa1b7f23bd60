"""docs/design.md's import boundaries, checked in a fresh interpreter each (sys.modules is shared
within pytest, so an in-process check would see whatever another test imported)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from benchmarks.stack import REPO


def loaded_after(statement: str) -> list[str]:
    probe = (f"import sys, json; {statement}; "
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True, cwd=REPO)
    return json.loads(done.stdout)


def ours(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


def test_a_training_script_loads_nothing_of_the_operator_cli_or_the_exporter() -> None:
    modules = loaded_after("import trial_instrumentation")
    assert "trial_instrumentation" in modules
    assert ours(modules, "trainwatch") == []
    assert ours(modules, "exporter") == []
    assert "requests" not in modules
    # The integrations' frameworks load only with their own module (seconds of import each).
    for framework in ("lightning", "pytorch_lightning", "transformers", "accelerate", "torch"):
        assert ours(modules, framework) == [], framework


@pytest.mark.parametrize("framework", ["lightning", "transformers"])
def test_an_integration_module_loads_its_framework(framework: str) -> None:
    pytest.importorskip(framework)
    modules = loaded_after(f"import trial_instrumentation.{framework}")
    assert framework in modules
    assert ours(modules, "trainwatch") == [] and ours(modules, "exporter") == []


@pytest.mark.parametrize("module", ["trainwatch.cli", "trainwatch.stack"])
def test_the_operator_cli_never_imports_the_exporter(module: str) -> None:
    modules = loaded_after(f"import {module}")
    assert module in modules
    assert ours(modules, "exporter") == []


def test_the_exporter_never_imports_the_training_library_or_the_cli() -> None:
    modules = loaded_after("import exporter.cli")
    assert ours(modules, "trial_instrumentation") == []
    assert ours(modules, "trainwatch") == []


# The operator CLI's parts that sit above the shared contract; the generators never load them.
CLI_PARTS = ("trainwatch.cli", "trainwatch.diagnose", "trainwatch.stack", "trainwatch.report",
             "trainwatch.gc", "trainwatch.demo", "trainwatch.webhook", "trainwatch.promapi")


@pytest.mark.parametrize("generator", ["prometheus.generate_rules", "grafana.generate"])
def test_the_generators_read_the_contract_never_the_operator_cli(generator: str) -> None:
    pytest.importorskip("grafana_foundation_sdk")
    modules = loaded_after(f"import {generator}")
    assert "trainwatch.contract.records" in modules
    assert [m for part in CLI_PARTS for m in ours(modules, part)] == []
    assert ours(modules, "exporter") == []


def test_the_contract_is_a_leaf() -> None:
    modules = loaded_after("import trainwatch.contract.alerts, trainwatch.contract.checks, "
                           "trainwatch.contract.promql, trainwatch.contract.records, "
                           "trainwatch.contract.remedies")
    assert sorted(set(ours(modules, "trainwatch")) - set(ours(modules, "trainwatch.contract"))) \
        == ["trainwatch"]
    # trial_instrumentation.names, and the package's own __init__ that importing it runs.
    assert "trial_instrumentation.names" in modules
    assert ours(modules, "exporter") == [] and ours(modules, "prometheus") == []
    assert ours(modules, "grafana") == []


def test_only_the_cli_reaches_up_to_the_demo() -> None:
    """The demo sits on top of the stack, the webhook and diagnose; none of them imports it,
    not even inside a function (read from the source: a lazy import never shows in sys.modules
    until it runs)."""
    reaching = []
    for path in sorted((REPO / "trainwatch").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("trainwatch/demo/") or relative == "trainwatch/cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                named = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                continue
            if any(n == "trainwatch.demo" or n.startswith("trainwatch.demo.") for n in named):
                reaching.append(relative)
    assert reaching == []
