"""pyproject.toml builds without setuptools' deprecation warnings (`make run` printed them)."""

from __future__ import annotations

import warnings

import pytest

from benchmarks.stack import REPO


def test_setuptools_reads_pyproject_without_a_warning() -> None:
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = pyprojecttoml.apply_configuration(Distribution(), REPO / "pyproject.toml")
    assert [str(w.message) for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"
