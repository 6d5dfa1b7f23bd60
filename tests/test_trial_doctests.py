"""The docstring examples of trial_instrumentation run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["__init__", "collector", "config", "gpus", "loader", "pusher", "timing", "torch_devices",
           "transport", "trial"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    if name.startswith("torch_"):
        pytest.importorskip("torch")
    module = importlib.import_module("trial_instrumentation" if name == "__init__"
                                     else f"trial_instrumentation.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
