"""Closed sets of words that a reader tells apart (an acknowledgement file's state, a baseline's
judgement, the password check's answer): no two members share a word, so no reader can take one
for the other."""

from __future__ import annotations

import pytest

from exporter.webauth import Verdict
from trainwatch.diagnose import baseline_stats
from trial_instrumentation import profile_ack


@pytest.mark.parametrize("words", [
    (profile_ack.STARTED, profile_ack.REFUSED, profile_ack.DROPPED, profile_ack.WRITTEN),
    (baseline_stats.NO_BASELINE, baseline_stats.NO_CHANGE, baseline_stats.SLOWER,
     baseline_stats.FASTER),
], ids=["profile acknowledgements", "baseline judgements"])
def test_no_two_words_of_a_set_are_one(words: tuple[str, ...]) -> None:
    assert len(set(words)) == len(words) and all(words)


def test_the_password_check_has_three_distinct_answers() -> None:
    # An Enum whose values collide makes the later name an alias: BUSY would be DENIED.
    assert [v.name for v in Verdict] == ["OK", "DENIED", "BUSY"]
