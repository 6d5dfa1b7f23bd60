"""exporter.reclaim: when a Reclaimer schedules its collection, what one run does, and the arena
cap it asks glibc for (libc's functions replaced by recorders)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from exporter import reclaim
from exporter.reclaim import Reclaimer


class Loop:
    """The one event-loop call a Reclaimer makes, recorded."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.later.append((delay, callback))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    made: list[tuple[Any, ...]] = []
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(reclaim, "_MALLOPT", lambda *args: made.append(("mallopt", *args)) or 1)
    monkeypatch.setattr(reclaim, "_TRIM", lambda *args: made.append(("trim", *args)) or 1)
    monkeypatch.setattr(reclaim.gc, "collect", lambda: made.append(("collect",)) or 0)
    return made


def test_a_reclaimer_caps_the_arenas_when_made(calls: list[tuple[Any, ...]]) -> None:
    made = Reclaimer()
    assert calls == [("mallopt", -8, 2)]
    assert (made.every, made.delay, made.ended, made.runs) == (64, 1.0, 0, 0)


def test_one_run_is_scheduled_once_every_connections_have_ended(
        calls: list[tuple[Any, ...]]) -> None:
    made, loop = Reclaimer(every=3, delay=2.5), Loop()
    made.ended_one(loop)  # type: ignore[arg-type]
    made.ended_one(loop)  # type: ignore[arg-type]
    assert loop.later == [] and made.ended == 2
    made.ended_one(loop)  # type: ignore[arg-type]
    assert [delay for delay, _ in loop.later] == [2.5]
    for _ in range(5):  # more ends while it is pending schedule nothing more
        made.ended_one(loop)  # type: ignore[arg-type]
    assert len(loop.later) == 1 and made.ended == 8
    calls.clear()
    loop.later[0][1]()
    assert calls == [("collect",), ("trim", 0)]
    assert (made.ended, made.runs) == (0, 1)
    made.ended_one(loop)  # type: ignore[arg-type]
    made.ended_one(loop)  # type: ignore[arg-type]
    assert len(loop.later) == 1
    made.ended_one(loop)  # type: ignore[arg-type]
    assert len(loop.later) == 2
    loop.later[1][1]()
    assert made.runs == 2


def test_every_one_reclaims_after_each_end(calls: list[tuple[Any, ...]]) -> None:
    made, loop = Reclaimer(every=1, delay=0.0), Loop()
    made.ended_one(loop)  # type: ignore[arg-type]
    assert len(loop.later) == 1 and loop.later[0][0] == 0.0


def test_reclaim_collects_and_trims(calls: list[tuple[Any, ...]]) -> None:
    reclaim.reclaim()
    assert calls == [("collect",), ("trim", 0)]


def test_without_malloc_trim_reclaim_only_collects(calls: list[tuple[Any, ...]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reclaim, "_TRIM", None)
    reclaim.reclaim()
    assert calls == [("collect",)]


def test_the_arena_cap_is_what_mallopt_says(calls: list[tuple[Any, ...]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert reclaim.limit_arenas(5) is True
    assert calls == [("mallopt", -8, 5)]
    monkeypatch.setattr(reclaim, "_MALLOPT", lambda *args: 0)  # mallopt failed
    assert reclaim.limit_arenas() is False


def test_the_environment_or_a_missing_glibc_leaves_the_arenas_alone(
        calls: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert reclaim.limit_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setattr(reclaim, "_MALLOPT", None)
    assert reclaim.limit_arenas() is False
    assert calls == []


def test_libc_functions_are_found_or_none() -> None:
    assert reclaim._libc("no_such_function_in_libc") is None
    assert callable(reclaim._libc("malloc_trim"))
    assert (reclaim.M_ARENA_MAX, reclaim.MALLOC_ARENAS) == (-8, 2)


def test_the_real_functions_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    reclaim.reclaim()
    assert reclaim.limit_arenas(8) is True  # glibc's mallopt returns 1 on success


def test_without_a_loadable_libc_there_is_no_function(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(reclaim.ctypes, "CDLL", no_libc)
    assert reclaim._libc("malloc_trim") is None


@pytest.mark.parametrize(("found", "opened"), [(None, "libc.so.6"),
                                               ("libc.musl-x86_64.so.1", "libc.musl-x86_64.so.1")])
def test_the_c_library_is_the_one_found_else_glibcs_name(
        monkeypatch: pytest.MonkeyPatch, found: str | None, opened: str) -> None:
    names: list[str | None] = []

    def cdll(name: str | None) -> object:
        names.append(name)
        return SimpleNamespace(malloc_trim=len)

    monkeypatch.setattr(reclaim.ctypes.util, "find_library", lambda name: found)
    monkeypatch.setattr(reclaim.ctypes, "CDLL", cdll)
    assert reclaim._libc("malloc_trim") is len
    assert names == [opened]


def test_a_count_already_past_every_schedules_at_the_next_end(
        calls: list[tuple[Any, ...]]) -> None:
    """every=0: each end is past the threshold; one run is scheduled at the first end."""
    made, loop = Reclaimer(every=0, delay=0.5), Loop()
    made.ended_one(loop)  # type: ignore[arg-type]
    made.ended_one(loop)  # type: ignore[arg-type]
    assert [delay for delay, _ in loop.later] == [0.5]


@pytest.mark.skipif(reclaim._TRIM is None, reason="glibc only")
def test_a_real_run_gives_freed_heap_below_a_live_block_back_to_the_system() -> None:
    """free() alone keeps freed heap that a live block above it pins; glibc's malloc_trim(0)
    returns those pages, which the process's resident size shows (what reclaim is for)."""
    import ctypes
    import ctypes.util
    import os

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def resident() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    size, count = 4096, 20000  # under the mmap threshold: heap, not one mapping each
    blocks = [libc.malloc(size) for _ in range(count)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    top = libc.malloc(64)  # a live block above them: free() cannot shrink the heap past it
    try:
        for block in blocks:
            libc.free(block)
        freed = resident()
        reclaim.reclaim()
        after = resident()
    finally:
        libc.free(top)
    assert freed - after > count * size // 2
