"""Shared fixtures: real components started per test in a temp dir."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import Service, start_pushgateway
from tests.live_stack import LiveStack, two_trial_stack

# SIGTERM tears the fixtures down, so a killed run stops the stacks it started (the hook,
# imported here, is this conftest's).
from tests.sigterm_teardown import pytest_configure  # noqa: F401


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Sets the process's local time zone for the test to a POSIX TZ rule (no zone database
    needed: "XYZ-05:30" is 5 h 30 east of UTC, "XYZ+07:00" 7 h west, "UTC"); the zone the process
    had is back after it."""
    def set_zone(rule: str) -> None:
        monkeypatch.setenv("TZ", rule)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Service]:
    """A fresh, empty, non-persisting Pushgateway on a free loopback port."""
    with start_pushgateway(tmp_path) as pgw:
        yield pgw


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules on the shared two_trials stack run last, one after the other. A session
    fixture stops only when the session ends: run where their files fall in the suite, its
    healthy trial (a loop flat out on one core) and its Prometheus took a core of this 2-core
    machine from every test after the first of them, most of the suite."""
    def module(item: pytest.Item) -> object:
        return getattr(item, "module", None)

    shared = {module(i) for i in items if "two_trials" in getattr(i, "fixturenames", ())}
    shared.discard(None)
    if shared:
        items[:] = ([i for i in items if module(i) not in shared]
                    + [i for i in items if module(i) in shared])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n` (`make test`), each test file runs whole on one worker (its module
    fixtures start once), and the modules on the shared two_trials stack all on the same one,
    so one such stack is started, not one per worker. The worker cannot be told by fixtures
    here (only node ids reach the scheduler): a module shares it when its source names it."""
    from xdist.scheduler import LoadFileScheduling

    root = Path(str(config.rootpath))

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(root / nodeid.split("::", 1)[0])

    return Scheduling(config, log)


@functools.cache
def _scope(module: Path) -> str:
    if module.suffix == ".py" and "two_trials" in module.read_text(errors="replace"):
        return "two_trials"
    return str(module)


@pytest.fixture(scope="session")
def two_trials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """One live stack with a slow and a healthy PyTorch trial, shared by the diagnose and report
    tests (tests/live_stack.py's two_trial_stack)."""
    pytest.importorskip("torch")
    with two_trial_stack(tmp_path_factory.mktemp("two_trials")) as live:
        yield live


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as the subprocess runs get from OMP_NUM_THREADS=1: on a small
    shared machine two spinning OpenMP threads turn a tiny step into a long stall."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
