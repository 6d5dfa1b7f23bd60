"""docs/design.md's import boundaries, checked in a fresh interpreter each (sys.modules is shared
within pytest, so an in-process check would see whatever another test imported)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
             "trainwatch.gc", "trainwatch.demo", "trainwatch.webhook", "trainwatch.promapi",
             "trainwatch.lookup", "trainwatch.layout", "trainwatch.procs", "trainwatch.runbooks")


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


# trainwatch's layers, top first: a module imports only from its own part (a subpackage or a
# top-level module) or from a lower layer; two parts of one layer never import each other.
# docs/design.md ("Import boundaries") names them in this order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("trainwatch.demo",),
    ("trainwatch.cli",),
    ("trainwatch.report",),
    ("trainwatch.usage",),
    ("trainwatch.diagnose", "trainwatch.stack"),
    ("trainwatch.gc", "trainwatch.profile", "trainwatch.run", "trainwatch.webhook",
     "trainwatch.alertmanager"),
    ("trainwatch.lookup", "trainwatch.promapi"),
    ("trainwatch.layout", "trainwatch.procs", "trainwatch.runbooks", "trainwatch.httpget",
     "trainwatch.cliutil", "trainwatch.contract"),
)
# The package's own __init__ runs before any part of it: it sits below every layer.
ROOT = "trainwatch"


def part_of(module: str) -> str | None:
    """The layer entry ``module`` belongs to (``trainwatch.stack.up`` -> ``trainwatch.stack``)."""
    if module == ROOT:
        return ROOT
    return next((p for layer in LAYERS for p in layer
                 if module == p or module.startswith(p + ".")), None)


def layer_of(part: str) -> int:
    return len(LAYERS) if part == ROOT else \
        next(i for i, layer in enumerate(LAYERS) if part in layer)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path) -> bool:
    path = root / Path(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def trainwatch_imports(path: Path, module: str, root: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import of trainwatch in ``path``: at module level and
    inside functions alike (a lazy import is still a dependency)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from trainwatch import gc` imports the module trainwatch.gc, not the package.
            found = [f"{base}.{a.name}" if is_module(f"{base}.{a.name}", root) else base
                     for a in node.names]
        else:
            continue
        for name in dict.fromkeys(found):  # once each: `from m import a, b` is one import of m
            if name == ROOT or name.startswith(ROOT + "."):
                yield node.lineno, name


def layering_problems(root: Path) -> list[str]:
    """Every import in ``root``/trainwatch that breaks LAYERS, as 'file:line ...' lines."""
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}  # (importer part, imported part) -> first 'file:line'
    for path in sorted((root / "trainwatch").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        module = module_name(path, root)
        importer = part_of(module)
        if importer is None:
            problems.append(f"{relative}: {module} is in no layer of LAYERS: place it")
            continue
        for line, name in trainwatch_imports(path, module, root):
            imported = part_of(name)
            if imported is None:
                problems.append(f"{relative}:{line} imports {name}, which is in no layer")
            elif imported != importer and layer_of(imported) < layer_of(importer):
                problems.append(f"{relative}:{line} imports {name}: {imported} (layer "
                                f"{layer_of(imported)}) is above {importer} (layer "
                                f"{layer_of(importer)})")
            elif imported != importer:
                seen.setdefault((importer, imported), f"{relative}:{line} imports {name}")
    for (importer, imported), where in sorted(seen.items()):
        back = seen.get((imported, importer))
        if back and layer_of(importer) == layer_of(imported) and importer < imported:
            problems.append(f"{where}, and {back}: {importer} and {imported} share layer "
                            f"{layer_of(importer)} and import each other")
    return problems


def test_every_layer_names_a_part_of_trainwatch_once() -> None:
    parts = [p for layer in LAYERS for p in layer]
    assert len(parts) == len(set(parts))
    assert [p for p in parts if not is_module(p, REPO)] == []


def test_trainwatch_imports_point_down_its_layers_only() -> None:
    """Read from the source: every import counts, one inside a function too (the stack <->
    webhook cycle this replaced hid there, beside diagnose <-> report and stack <-> gc)."""
    problems = layering_problems(REPO)
    assert not problems, "\n".join(problems)


# A part that offers one public entry is read through it alone by the parts named with it.
ENTRIES = {"trainwatch.diagnose": ("trainwatch.diagnose.entry", ("trainwatch.report",))}


def entry_problems(root: Path) -> list[str]:
    """Every import that reaches past a part's public entry (ENTRIES), as 'file:line ...'."""
    problems = []
    for path in sorted((root / "trainwatch").rglob("*.py")):
        module = module_name(path, root)
        importer = part_of(module)
        for line, name in trainwatch_imports(path, module, root):
            imported = part_of(name)
            entry, readers = ENTRIES.get(imported or "", ("", ()))
            if importer in readers and name != entry:
                problems.append(f"{path.relative_to(root).as_posix()}:{line} imports {name}: "
                                f"{importer} reads {imported} through {entry} only")
    return problems


def test_the_report_reads_diagnose_through_its_one_public_entry(tmp_path: Path) -> None:
    assert entry_problems(REPO) == []
    # And the check sees a reach past it: a report module importing diagnose's figures.
    for rel in ("trainwatch/report/x.py", "trainwatch/diagnose/figures.py",
                "trainwatch/diagnose/entry.py", "trainwatch/report/__init__.py",
                "trainwatch/diagnose/__init__.py", "trainwatch/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "trainwatch/report/x.py").write_text(
        "from trainwatch.diagnose.entry import RankReport\n"
        "from trainwatch.diagnose.figures import UnknownTrial\n"
        "def f():\n    from trainwatch.diagnose import figures\n")
    why = ("imports trainwatch.diagnose.figures: trainwatch.report reads trainwatch.diagnose "
           "through trainwatch.diagnose.entry only")
    assert entry_problems(tmp_path) == [f"trainwatch/report/x.py:2 {why}",
                                        f"trainwatch/report/x.py:4 {why}"]
