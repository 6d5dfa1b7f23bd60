"""Bad settings fail when the Trial is created, with an error naming where they came from."""

from __future__ import annotations

from typing import Any

import pytest

import trial_instrumentation as ti
from tests.trial_support import StatusServer
from trial_instrumentation import names

GOOD: dict[str, Any] = {"experiment": "e", "trial": "t", "pushgateway": "http://127.0.0.1:9091"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in vars(names).values():
        if isinstance(var, str) and (var.startswith("TRAINWATCH_") or var in (
                names.ENV_RANK, names.ENV_WORLD_SIZE, names.ENV_LOCAL_RANK)):
            monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(("override", "message"), [
    ({"pushgateway": "pushgateway:9091"}, "pushgateway=.*http"),
    ({"pushgateway": "ftp://host"}, "pushgateway="),
    ({"pushgateway": "http://"}, "pushgateway="),
    ({"pushgateway": "http://host:99999"}, "pushgateway=.*out of range"),
    ({"push_interval": 0}, "push_interval="),
    ({"push_interval": -5}, "push_interval="),
    ({"push_interval": float("nan")}, "push_interval="),
    ({"experiment": ""}, "experiment="),
    ({"trial": "a/b"}, "trial=.*'/'"),
    ({"experiment": None}, "experiment is required.*TRAINWATCH_EXPERIMENT"),
    ({"rank": 2, "world_size": 2}, "rank 2 is not below world size 2"),
    ({"rank": -1}, "rank="),
    ({"local_rank": -1}, "local_rank="),
    ({"timing_mode": "gpu"}, "timing_mode=.*cuda_events"),
    ({"buckets": [1.0, 0.5]}, "buckets=.*increasing"),
    ({"buckets": []}, "buckets=.*empty"),
    ({"phase_buckets": [1.0, 0.5]}, "phase_buckets=.*increasing"),
    ({"phase_buckets": "fast"}, "phase_buckets=.*'none' or comma-separated"),
    ({"username": "u"}, "username and a password"),
    ({"pull_port": 9999}, "not both"),
    ({"read_timeout": 0}, "read_timeout="),
    ({"gpu_uuids": ["0"]}, "gpu_uuids=.*NVML UUIDs"),
    ({"gpu_uuids": "GPU-ab12,cuda:1"}, "gpu_uuids=.*cuda:1"),
])
def test_bad_argument_raises_at_creation(override: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ti.Trial(**{**GOOD, **override})  # type: ignore[arg-type]


@pytest.mark.parametrize(("var", "value"), [
    (names.ENV_PUSHGATEWAY, "not a url"),
    (names.ENV_PUSH_INTERVAL, "0"),
    (names.ENV_PUSH_INTERVAL, "ten"),
    (names.ENV_TRIAL, "x/y"),
    (names.ENV_RANK, "one"),
    (names.ENV_WORLD_SIZE, "0"),
    (names.ENV_LOCAL_RANK, "gpu1"),
    (names.ENV_PULL_PORT, "70000"),
    (names.ENV_TIMING_MODE, "cuda"),
    (names.ENV_GPU_UUIDS, "0,1"),
    (names.ENV_PHASE_BUCKETS, "0.1,x"),
    (names.ENV_PHASE_BUCKETS, "-1"),
])
def test_bad_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch, var: str,
                                            value: str) -> None:
    for key, default in ((names.ENV_PUSHGATEWAY, GOOD["pushgateway"]),
                         (names.ENV_EXPERIMENT, "e"), (names.ENV_TRIAL, "t")):
        monkeypatch.setenv(key, default)
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"environment variable {var}"):
        ti.Trial.from_env()


def test_environment_configures_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {names.ENV_PUSHGATEWAY: "https://gw.example:9091/prefix/", names.ENV_EXPERIMENT: "e",
           names.ENV_TRIAL: "t7", names.ENV_PUSH_INTERVAL: "2.5",
           "RANK": "3", "WORLD_SIZE": "4",
           names.ENV_LOCAL_RANK: "1", names.ENV_NODENAME: "node-a",
           names.ENV_GPU_UUIDS: "GPU-bb, GPU-aa,,MIG-cc"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = ti.Trial.from_env().config
    assert (config.pushgateway, config.push_interval) == ("https://gw.example:9091/prefix", 2.5)
    assert config.grouping_key == {"experiment": "e", "trial": "t7", "rank": "3"}
    assert (config.world_size, config.local_rank, config.nodename) == (4, 1, "node-a")
    assert config.gpu_uuids == ("GPU-aa", "GPU-bb", "MIG-cc")
    # An argument wins over its variable.
    assert ti.Trial(trial="t8", push_interval=1).config.trial == "t8"


def test_unset_environment_is_a_no_op_trial() -> None:
    trial = ti.Trial(experiment="e", trial="t")
    assert not trial.enabled
    assert trial.config.push_interval == 10.0
    assert trial.config.local_rank is None  # not under torchrun


def test_basic_auth_is_sent_and_the_password_never_printed() -> None:
    server = StatusServer(200)
    try:
        with ti.Trial(**{**GOOD, "pushgateway": server.url}, username="user",
                      password="s3cret") as trial:
            assert "s3cret" not in repr(trial.config)
    finally:
        server.close()
    assert server.requests == ["PUT", "PUT"]  # first push, final push; never a delete
    assert set(server.authorization) == {"Basic dXNlcjpzM2NyZXQ="}
