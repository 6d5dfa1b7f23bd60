"""live_keys on its own: which owner holds a key and when it is free again (closed, or its trial
collected), and where a trial is said to be made (the user's innermost frame, through which
integration)."""

from __future__ import annotations

import gc
import os
import sysconfig
import traceback

import pytest

from trial_instrumentation import live_keys
from trial_instrumentation.live_keys import KeyInUse

KEY = ("exp", "tri", "3")


class Owner:
    """A stand-in trial: anything weakly referenced."""


@pytest.fixture(autouse=True)
def no_live_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_keys, "_live", {})


def test_a_held_key_is_refused_to_another_owner_naming_both_places() -> None:
    first, second = Owner(), Owner()
    live_keys.claim(KEY, first, "a.py:1")
    live_keys.check(KEY, first, "a.py:1")  # its own key: no refusal
    live_keys.claim(KEY, first, "a.py:1")
    for refuse in (live_keys.check, live_keys.claim):
        with pytest.raises(KeyInUse) as refused:
            refuse(KEY, second, "b.py:2")
        assert str(refused.value) == (
            "trial exp/tri rank 3 is already live in this process (created at a.py:1); another "
            "Trial under the same key (created at b.py:2) would overwrite its pushes and it this "
            "one's: close the first (leave its `with` block) before, or give this one another "
            "trial= or rank= (a framework callback measures the loader's and the step's limits "
            "itself: measure_limits=)")
    assert isinstance(refused.value, ValueError)
    live_keys.claim(("exp", "tri", "4"), second, "b.py:2")  # another key is free
    live_keys.check(("exp", "other", "3"), second, "b.py:2")


def test_only_its_owner_releases_a_key() -> None:
    first, second = Owner(), Owner()
    live_keys.claim(KEY, first, "a.py:1")
    live_keys.release(KEY, second)
    with pytest.raises(KeyInUse):
        live_keys.check(KEY, second, "b.py:2")
    live_keys.release(KEY, first)
    live_keys.claim(KEY, second, "b.py:2")
    live_keys.release(("never", "held", "0"), first)  # nothing held: nothing to do
    assert list(live_keys._live) == [KEY]


def test_a_collected_trial_frees_its_key() -> None:
    gone, other = Owner(), Owner()
    live_keys.claim(KEY, gone, "a.py:1")
    del gone
    gc.collect()
    live_keys.check(KEY, other, "b.py:2")
    assert KEY not in live_keys._live  # dropped once found dead
    live_keys.claim(KEY, other, "b.py:2")
    assert live_keys._live[KEY][1] == "b.py:2"


def test_a_collected_trials_key_is_released_by_anyone() -> None:
    gone = Owner()
    live_keys.claim(KEY, gone, "a.py:1")
    del gone
    gc.collect()
    live_keys.release(KEY, Owner())
    assert KEY not in live_keys._live


OURS = os.path.dirname(os.path.abspath(live_keys.__file__))
LIBRARY = os.path.abspath(sysconfig.get_paths()["purelib"])


def made_from(monkeypatch: pytest.MonkeyPatch, *frames: tuple[str, int]) -> str:
    """created_here() with a stack of these frames, outermost first."""
    stack = [traceback.FrameSummary(path, line, "f") for path, line in frames]
    monkeypatch.setattr(live_keys.traceback, "extract_stack", lambda: stack)
    return live_keys.created_here()


def test_a_trial_is_made_at_the_users_innermost_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    assert made_from(monkeypatch, ("/job/train.py", 40), ("/job/model.py", 7),
                     (f"{LIBRARY}/lightning/trainer.py", 90), (f"{OURS}/trial.py", 70),
                     (f"{OURS}/live_keys.py", 36)) == "/job/model.py:7"


@pytest.mark.parametrize(("module", "integration"), [
    ("lightning.py", "the Lightning TrainwatchCallback"),
    ("transformers.py", "the Hugging Face TrainwatchCallback")])
def test_a_trial_made_by_an_integration_names_it(monkeypatch: pytest.MonkeyPatch, module: str,
                                                 integration: str) -> None:
    assert made_from(monkeypatch, ("/job/train.py", 40), (f"{LIBRARY}/fw/fit.py", 12),
                     (f"{OURS}/{module}", 55), (f"{OURS}/trial.py", 70),
                     (f"{OURS}/live_keys.py", 36)) == f"/job/train.py:40, by {integration}"


def test_without_a_frame_of_the_users_the_place_is_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert made_from(monkeypatch, (f"{LIBRARY}/fw/fit.py", 12), (f"{OURS}/trial.py", 70)) \
        == "an unknown place"
    assert made_from(monkeypatch, (f"{LIBRARY}/fw/fit.py", 12), (f"{OURS}/transformers.py", 9),
                     (f"{OURS}/trial.py", 70)) \
        == "an unknown place, by the Hugging Face TrainwatchCallback"


def test_a_path_beside_the_package_is_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    beside = f"{OURS}_extra/lightning.py"  # starts like the package's directory, is not in it
    assert made_from(monkeypatch, (beside, 5), (f"{OURS}/trial.py", 70)) == f"{beside}:5"


def test_both_library_directories_are_libraries_where_they_differ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where pure and platform packages live apart (Fedora's lib and lib64), a frame in either
    is an installed package's; read in a fresh copy of the module, the one in use untouched."""
    import importlib.util

    paths = {**sysconfig.get_paths(), "purelib": "/usr/lib/python3.11/site-packages",
             "platlib": "/usr/lib64/python3.11/site-packages"}
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    spec = importlib.util.spec_from_file_location("live_keys_copy", live_keys.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    stack = [traceback.FrameSummary(path, line, "f") for path, line in (
        ("/job/train.py", 40), ("/usr/lib/python3.11/site-packages/fw/fit.py", 12),
        ("/usr/lib64/python3.11/site-packages/torch/nn/module.py", 7))]
    monkeypatch.setattr(copy.traceback, "extract_stack", lambda: stack)
    assert copy.created_here() == "/job/train.py:40"
