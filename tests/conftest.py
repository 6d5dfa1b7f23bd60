"""Shared fixtures: real components started per test in a temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import Service, start_pushgateway


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Service]:
    """A fresh, empty, non-persisting Pushgateway on a free loopback port."""
    with start_pushgateway(tmp_path) as pgw:
        yield pgw
