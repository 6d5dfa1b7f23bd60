"""One live trial per grouping key in a process: a second one is refused naming both, never a
silent overwrite of each other's pushes; a closed trial frees its key."""

from __future__ import annotations

import re
import sys

import pytest

import trial_instrumentation as ti
from trial_instrumentation.live_keys import KeyInUse


def here(below: int = 0) -> str:
    """This file and the caller's line (or the one ``below`` lines under it)."""
    return f"{__file__}:{sys._getframe(1).f_lineno + below}"


def test_a_second_live_trial_under_one_key_is_refused_naming_where_both_were_made() -> None:
    first_at, first = here(), ti.Trial("e", "k", pull_port=0).start()
    try:
        second_at = here(below=2)
        with pytest.raises(KeyInUse) as refused:
            ti.Trial("e", "k", pull_port=0)
        message = str(refused.value)
        assert message.startswith("trial e/k rank 0 is already live in this process (created "
                                  f"at {first_at}); another Trial under the same key (created "
                                  f"at {second_at}) would overwrite its pushes")
        # Another rank or trial is another key; a disabled trial pushes nothing.
        with ti.Trial("e", "k", pull_port=0, rank=1, world_size=2), \
                ti.Trial("e", "k2", pull_port=0), ti.Trial("e", "k"):
            pass
    finally:
        first.close()
    with ti.Trial("e", "k", pull_port=0) as again:  # closed: the key is free
        assert again.enabled


def test_a_trial_made_before_the_other_started_is_refused_at_its_start() -> None:
    waiting = ti.Trial("e", "late", pull_port=0)
    with ti.Trial("e", "late", pull_port=0), \
            pytest.raises(KeyInUse, match=re.escape("trial e/late rank 0 is already live")):
        waiting.start()
    waiting.start().close()  # the first closed: it may start now


def test_an_unstarted_trial_holds_no_key() -> None:
    ti.Trial("e", "idle", pull_port=0)
    with ti.Trial("e", "idle", pull_port=0) as trial:
        assert trial.enabled
