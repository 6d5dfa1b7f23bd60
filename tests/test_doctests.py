"""Every docstring example in the project runs and holds, and each one checks something.

Modules are found by walking the packages, so a new module's examples run without a list to
update; a module without examples is not a test here (no case that passes with nothing run).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

from benchmarks.stack import REPO

PACKAGES = ("exporter", "trial_instrumentation", "trainwatch", "prometheus", "grafana")
# Modules that need an optional dependency: (module prefix, the import it needs).
NEEDS = (("trial_instrumentation.torch_", "torch"), ("grafana", "grafana_foundation_sdk"))
FINDER = doctest.DocTestFinder(exclude_empty=True)


def module_names() -> list[str]:
    names = []
    for package in PACKAGES:
        path = [str(REPO / package)]
        names.append(package)
        names += [info.name for info in pkgutil.walk_packages(path, f"{package}.")]
    return sorted(names)


def has_examples(name: str) -> bool:
    """Read the source instead of importing: collection must not need torch or the SDK."""
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None and ">>>" in open(spec.origin).read()


WITH_EXAMPLES = [name for name in module_names() if has_examples(name)]


def load(name: str) -> ModuleType:
    for prefix, needed in NEEDS:
        if name.startswith(prefix):
            pytest.importorskip(needed)
    return importlib.import_module(name)


def test_the_walk_finds_the_modules_known_to_have_examples() -> None:
    assert {"exporter.host", "exporter.webauth", "trial_instrumentation.timing",
            "trainwatch.diagnose.verdict", "prometheus.rulegen.recording"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_hold(name: str) -> None:
    module = load(name)
    tests = FINDER.find(module)
    examples = sum(len(t.examples) for t in tests)
    result = doctest.testmod(module)
    assert (result.failed, result.attempted) == (0, examples) and examples > 0


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_each_docstring_example_checks_an_output(name: str) -> None:
    """Examples whose every line expects nothing only prove that the code does not raise: show
    a result, or write the example as plain text (no ``>>>``) so it is not counted as a test."""
    for test in (t for t in FINDER.find(load(name)) if t.examples):
        assert any(example.want.strip() for example in test.examples), \
            f"{test.name} ({test.filename}:{test.lineno}) checks no output"
        for example in test.examples:
            assert "in (True, False)" not in example.source, \
                f"{test.name}: `{example.source.strip()}` holds whatever the answer"
