"""Where a trial runs, in trainwatch_trial_info: the Kubernetes namespace and pod (downward API
variables), the Slurm job and its user, the OS user name, empty where unknown and bounded; and
the rank, world size and local rank from Slurm's variables where torchrun's are absent."""

from __future__ import annotations

import os
import pwd

import pytest

import trial_instrumentation as ti
from trial_instrumentation import config, names, placement

PLACEMENT_ENV = (names.ENV_K8S_NAMESPACE, names.ENV_K8S_POD, names.ENV_SLURM_JOB_ID,
                 names.ENV_SLURM_JOB_USER)
RANK_ENV = (names.ENV_RANK, names.ENV_WORLD_SIZE, names.ENV_LOCAL_RANK, names.ENV_SLURM_RANK,
            names.ENV_SLURM_WORLD_SIZE, names.ENV_SLURM_LOCAL_RANK)
BASE = {names.ENV_PUSHGATEWAY: "http://127.0.0.1:9", names.ENV_EXPERIMENT: "e",
        names.ENV_TRIAL: "t"}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*PLACEMENT_ENV, *RANK_ENV, *BASE):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def info_of(env: pytest.MonkeyPatch, **variables: str) -> dict[str, str]:
    """The labels of the trainwatch_trial_info a trial configured by ``variables`` pushes."""
    for name, value in {**BASE, **variables}.items():
        env.setenv(name, value)
    trial = ti.Trial()
    [family] = [f for f in trial.registry.collect() if f.name == names.TRIAL_INFO]
    [sample] = family.samples
    assert sample.value == 1
    return dict(sample.labels)


def test_trial_info_names_the_pod_and_the_slurm_job_from_the_environment(
        clean_env: pytest.MonkeyPatch) -> None:
    info = info_of(clean_env, TRAINWATCH_K8S_NAMESPACE="team-vision",
                   TRAINWATCH_K8S_POD="resnet-worker-0", SLURM_JOB_ID="81234",
                   SLURM_JOB_USER="alice")
    assert {key: info[key] for key in placement.PLACEMENT_LABELS} == {
        "k8s_namespace": "team-vision", "k8s_pod": "resnet-worker-0", "slurm_job_id": "81234",
        "slurm_job_user": "alice", "user": pwd.getpwuid(os.getuid()).pw_name}
    assert (info["pid"], info["world_size"]) == (str(os.getpid()), "1")


def test_unknown_placement_is_empty_not_made_up(clean_env: pytest.MonkeyPatch) -> None:
    info = info_of(clean_env)
    assert set(info) == {"nodename", "pid", "world_size", *placement.PLACEMENT_LABELS}
    assert {key: info[key] for key in PLACEMENT_ENV_LABELS} == dict.fromkeys(
        PLACEMENT_ENV_LABELS, "")
    assert info["user"] != ""  # this process's uid has a name here


PLACEMENT_ENV_LABELS = ("k8s_namespace", "k8s_pod", "slurm_job_id", "slurm_job_user")


def test_a_blank_variable_is_unknown(clean_env: pytest.MonkeyPatch) -> None:
    info = info_of(clean_env, TRAINWATCH_K8S_NAMESPACE="  ", SLURM_JOB_ID="")
    assert (info["k8s_namespace"], info["slurm_job_id"]) == ("", "")


@pytest.mark.parametrize("variable", PLACEMENT_ENV)
def test_an_overlong_value_is_refused_naming_its_variable(clean_env: pytest.MonkeyPatch,
                                                          variable: str) -> None:
    clean_env.setenv(variable, "x" * (names.MAX_LABEL_LENGTH + 1))
    with pytest.raises(ValueError, match=f"environment variable {variable}.*256"):
        config.resolve()
    clean_env.setenv(variable, "x" * names.MAX_LABEL_LENGTH)
    config.resolve()  # at the limit: fine


def test_a_uid_without_a_name_gives_an_empty_user(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert placement.user_name() == ""


def test_a_long_user_name_is_cut_to_the_label_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = pwd.getpwuid(os.getuid())
    long = pwd.struct_passwd(("u" * 1000, *tuple(entry)[1:]))
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: long)
    assert placement.user_name() == "u" * names.MAX_LABEL_LENGTH


def test_slurm_gives_rank_world_size_and_local_rank_where_torchrun_does_not(
        clean_env: pytest.MonkeyPatch) -> None:
    for name, value in BASE.items():
        clean_env.setenv(name, value)
    clean_env.setenv("SLURM_PROCID", "3")
    clean_env.setenv("SLURM_NTASKS", "8")
    clean_env.setenv("SLURM_LOCALID", "1")
    cfg = config.resolve()
    assert (cfg.rank, cfg.world_size, cfg.local_rank) == (3, 8, 1)
    assert cfg.grouping_key["rank"] == "3"
    assert ti.Trial()._state.info["world_size"] == "8"


def test_torchrun_wins_over_slurm(clean_env: pytest.MonkeyPatch) -> None:
    """torchrun inside an sbatch allocation: one Slurm task, many torchrun ranks."""
    cfg = config.resolve(env={**BASE, "RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "5",
                              "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"})
    assert (cfg.rank, cfg.world_size, cfg.local_rank) == (5, 16, 5)


def test_an_argument_wins_over_both(clean_env: pytest.MonkeyPatch) -> None:
    cfg = config.resolve(env={**BASE, "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, rank=0,
                         world_size=4)
    assert (cfg.rank, cfg.world_size) == (0, 4)


def test_without_either_the_defaults_hold(clean_env: pytest.MonkeyPatch) -> None:
    cfg = config.resolve(env=BASE)
    assert (cfg.rank, cfg.world_size, cfg.local_rank) == (0, 1, None)


def test_a_bad_slurm_rank_is_refused_naming_slurms_variable() -> None:
    with pytest.raises(ValueError, match="environment variable SLURM_PROCID"):
        config.resolve(env={**BASE, "SLURM_PROCID": "x"})
    with pytest.raises(ValueError, match="environment variable SLURM_NTASKS: rank 2 is not "
                                         "below world size 2"):
        config.resolve(env={**BASE, "SLURM_PROCID": "2", "SLURM_NTASKS": "2"})
