"""ExitHooks (trial_instrumentation/lifecycle.py) in this process: what SIGTERM does while a
trial pushes, what is put back, and where nothing is installed. The whole process's death by
the signal is tests/test_trial_lifecycle.py's (a real trial, a real Pushgateway)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from trial_instrumentation import lifecycle, names
from trial_instrumentation.lifecycle import ExitHooks


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


class Finish:
    """``Trial.close``'s part: records the reason and uninstalls the hooks, as close does."""

    def __init__(self) -> None:
        self.hooks: ExitHooks | None = None
        self.reasons: list[str] = []
        self.handler_then: Any = None

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.handler_then = signal.getsignal(signal.SIGTERM)
        assert self.hooks is not None
        self.hooks.uninstall()


def _hooks() -> tuple[ExitHooks, Finish]:
    finish = Finish()
    hooks = ExitHooks(finish)
    finish.hooks = hooks
    return hooks, finish


def test_sigterm_pushes_terminated_then_runs_the_users_own_handler() -> None:
    seen: list[tuple[int, bool]] = []

    def users(signum: int, frame: FrameType | None) -> None:
        seen.append((signum, frame is not None))

    signal.signal(signal.SIGTERM, users)
    hooks, finish = _hooks()
    hooks.install()
    assert signal.getsignal(signal.SIGTERM) == hooks._on_sigterm
    os.kill(os.getpid(), signal.SIGTERM)  # run by Python in this (main) thread, at once
    assert finish.reasons == [names.EXIT_TERMINATED]
    assert finish.handler_then == hooks._on_sigterm  # finished before anything else
    assert seen == [(signal.SIGTERM, True)]
    assert signal.getsignal(signal.SIGTERM) is users  # put back by the finish's uninstall
    hooks.uninstall()  # a second uninstall changes nothing
    assert signal.getsignal(signal.SIGTERM) is users


def test_under_the_default_action_sigterm_pushes_then_dies_of_the_same_signal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[tuple[int, int, Any]] = []
    monkeypatch.setattr(lifecycle.os, "kill",
                        lambda pid, sig: kills.append((pid, sig, signal.getsignal(sig))))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    hooks, finish = _hooks()
    hooks.install()
    assert signal.getsignal(signal.SIGTERM) == hooks._on_sigterm
    hooks._on_sigterm(signal.SIGTERM, None)
    assert finish.reasons == [names.EXIT_TERMINATED]
    # Killed by SIGTERM itself, with the default action back in place first.
    assert kills == [(os.getpid(), signal.SIGTERM, signal.SIG_DFL)]


def test_an_ignored_sigterm_stays_ignored() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hooks, finish = _hooks()
    hooks.install()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert finish.reasons == []


def test_a_c_handler_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # signal.getsignal says None for a handler installed outside Python.
    installed: list[Any] = []
    monkeypatch.setattr(lifecycle.signal, "getsignal", lambda signum: None)
    monkeypatch.setattr(lifecycle.signal, "signal", lambda *args: installed.append(args))
    hooks, _ = _hooks()
    hooks.install()
    hooks.uninstall()
    assert installed == []


def _raised_on_another_thread(action: Callable[[], object]) -> list[BaseException]:
    """What ``action`` raised when run on a thread of its own ([] when nothing)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as err:  # noqa: BLE001 - returned for the caller's assert
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return errors


def test_off_the_main_thread_nothing_is_installed_or_removed() -> None:
    def users(signum: int, frame: FrameType | None) -> None:
        pass

    signal.signal(signal.SIGTERM, users)
    hooks, _ = _hooks()
    assert _raised_on_another_thread(hooks.install) == []
    assert signal.getsignal(signal.SIGTERM) is users
    # Installed on the main thread, it is not removed from another one (nor tried: Python
    # refuses signal handlers off the main thread with a ValueError).
    hooks.install()
    assert _raised_on_another_thread(hooks.uninstall) == []
    assert signal.getsignal(signal.SIGTERM) == hooks._on_sigterm
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is users


def test_a_handler_installed_after_ours_is_not_replaced_on_uninstall() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    hooks, _ = _hooks()
    hooks.install()

    def later(signum: int, frame: FrameType | None) -> None:
        pass

    signal.signal(signal.SIGTERM, later)  # someone replaced our hook meanwhile
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is later


def test_uninstall_without_install_touches_nothing() -> None:
    def users(signum: int, frame: FrameType | None) -> None:
        pass

    signal.signal(signal.SIGTERM, users)
    hooks, _ = _hooks()
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is users
    # Installed and uninstalled: a later uninstall does not put back an old handler.
    hooks.install()
    hooks.uninstall()

    def newer(signum: int, frame: FrameType | None) -> None:
        pass

    signal.signal(signal.SIGTERM, newer)
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is newer


def test_uninstall_puts_back_nothing_it_did_not_install_even_with_our_handler_in_place() -> None:
    def users(signum: int, frame: FrameType | None) -> None:
        pass

    signal.signal(signal.SIGTERM, users)
    never = ExitHooks(lambda reason: None)
    signal.signal(signal.SIGTERM, never._on_sigterm)  # set by someone else, not install()
    never.uninstall()
    assert signal.getsignal(signal.SIGTERM) == never._on_sigterm
    # Uninstalled once: a handler of ours put back later (a saved one restored) stays.
    signal.signal(signal.SIGTERM, users)
    hooks, _ = _hooks()
    hooks.install()
    saved = signal.getsignal(signal.SIGTERM)
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) is users
    signal.signal(signal.SIGTERM, saved)
    hooks.uninstall()
    assert signal.getsignal(signal.SIGTERM) == hooks._on_sigterm
