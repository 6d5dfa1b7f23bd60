"""placement.user_name where the platform cannot say (no pwd module, a failing lookup) and
info_labels' whole set of labels, in order, with this process's pid."""

from __future__ import annotations

import os
import pwd
import sys

import pytest

from trial_instrumentation import config, placement


def test_without_a_pwd_module_the_user_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pwd", None)  # import pwd raises ImportError
    assert placement.user_name() == ""


def test_a_lookup_that_fails_in_the_os_gives_an_empty_user(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(uid: int) -> pwd.struct_passwd:
        raise OSError("nss unavailable")

    monkeypatch.setattr(pwd, "getpwuid", failing)
    assert placement.user_name() == ""


def test_the_user_is_the_real_uids_name(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = pwd.getpwuid(os.getuid())
    asked: list[int] = []

    def lookup(uid: int) -> pwd.struct_passwd:
        asked.append(uid)
        return pwd.struct_passwd(("trainer-7", *tuple(entry)[1:]))

    monkeypatch.setattr(pwd, "getpwuid", lookup)
    assert placement.user_name() == "trainer-7"
    assert asked == [os.getuid()]


def test_the_info_labels_are_the_process_and_its_placement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "user_name", lambda: "alice")
    cfg = config.resolve(env={"TRAINWATCH_NODENAME": "n-3", "TRAINWATCH_K8S_NAMESPACE": "ml",
                              "TRAINWATCH_K8S_POD": "job-0", "SLURM_JOB_ID": "77",
                              "SLURM_JOB_USER": "bob"}, world_size=4, rank=2)
    labels = placement.info_labels(cfg)
    assert labels == {"nodename": "n-3", "pid": str(os.getpid()), "world_size": "4",
                      "k8s_namespace": "ml", "k8s_pod": "job-0", "slurm_job_id": "77",
                      "slurm_job_user": "bob", "user": "alice"}
    assert tuple(labels)[3:] == placement.PLACEMENT_LABELS
