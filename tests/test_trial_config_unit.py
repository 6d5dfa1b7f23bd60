"""config.resolve's own checks, each from both sides: the bound a setting is refused past and the
value just inside it, the settings checked together, and the warnings for unread variables."""

from __future__ import annotations

import logging

import pytest

from tests.frozen import assert_frozen
from trial_instrumentation import config, names


def test_a_world_of_one_rank_is_taken_and_one_of_none_is_refused_as_too_small() -> None:
    assert config.resolve(env={}, world_size=1).world_size == 1
    assert config.resolve(env={names.ENV_WORLD_SIZE: "1"}).world_size == 1
    # Refused by the setting's own bound, not only because rank 0 is not below it.
    with pytest.raises(ValueError, match=r"argument world_size=: .*integer >= 1"):
        config.resolve(env={}, world_size=0)
    with pytest.raises(ValueError, match=rf"variable {names.ENV_WORLD_SIZE}: .*integer >= 1"):
        config.resolve(env={names.ENV_WORLD_SIZE: "0"})


def test_local_rank_zero_is_the_first_gpu_and_below_it_is_refused() -> None:
    assert config.resolve(env={}, local_rank=0).local_rank == 0
    assert config.resolve(env={names.ENV_LOCAL_RANK: "0"}).local_rank == 0
    assert config.resolve(env={names.ENV_SLURM_LOCAL_RANK: "0"}).local_rank == 0
    with pytest.raises(ValueError, match=r"local_rank=: .*integer >= 0"):
        config.resolve(env={}, local_rank=-1)


@pytest.mark.parametrize(("rank", "world_size"), [(3, 2), (2, 2), (7, 3)])
def test_a_rank_at_or_past_the_world_size_is_refused(rank: int, world_size: int) -> None:
    with pytest.raises(ValueError, match=f"rank {rank} is not below world size {world_size}"):
        config.resolve(env={}, rank=rank, world_size=world_size)


@pytest.mark.parametrize(("rank", "world_size"), [(0, 1), (1, 2), (2, 7)])
def test_a_rank_below_the_world_size_is_taken(rank: int, world_size: int) -> None:
    cfg = config.resolve(env={}, rank=rank, world_size=world_size)
    assert (cfg.rank, cfg.world_size) == (rank, world_size)


def test_basic_auth_needs_both_halves_either_way() -> None:
    for given in ({"username": "u"}, {"password": "p"}):
        with pytest.raises(ValueError, match="both a username and a password"):
            config.resolve(env={}, **given)
    cfg = config.resolve(env={}, username="u", password="p")
    assert (cfg.username, cfg.password) == ("u", "p")


def test_the_first_unexpected_argument_in_order_is_named() -> None:
    with pytest.raises(TypeError, match="argument 'aaa'$"):
        config.resolve(env={}, zzz=1, aaa=2)


def test_an_unknown_variable_is_reported_after_other_variables_and_known_ones(
        caplog: pytest.LogCaptureFixture) -> None:
    # Sorted, the other and the known variables come first: each is passed over, not an end.
    env = {"AAA_OTHER": "1", names.ENV_EXPERIMENT: "e", "TRAINWATCH_PUSH_INTERVALL": "2",
           "TRAINWATCH_ZZZ_NOTHING_ALIKE": "3", "ZZZ_OTHER": "4"}
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        warnings = config.warn_unknown_variables(env)
    assert warnings == [
        ("trainwatch: unknown environment variable TRAINWATCH_PUSH_INTERVALL, ignored "
         "(did you mean TRAINWATCH_PUSH_INTERVAL?)"),
        ("trainwatch: unknown environment variable TRAINWATCH_ZZZ_NOTHING_ALIKE, ignored "
         f"(known: {', '.join(names.TRIAL_ENV)})")]
    assert [r.getMessage() for r in caplog.records] == warnings


def test_removed_and_unknown_variables_are_each_warned_of_once_in_order(
        caplog: pytest.LogCaptureFixture) -> None:
    env = {"TRAINWATCH_AAA_UNKNOWN": "1", names.ENV_DELETE_ON_EXIT: "1",
           "TRAINWATCH_ZZZ_UNKNOWN": "1"}
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        warnings = config.warn_unknown_variables(env)
    assert [w.split(" ")[1] for w in warnings] == [
        "unknown", names.ENV_DELETE_ON_EXIT, "unknown"]
    assert "TRAINWATCH_AAA_UNKNOWN" in warnings[0] and "TRAINWATCH_ZZZ_UNKNOWN" in warnings[2]
    assert warnings[1] == (f"trainwatch: {names.ENV_DELETE_ON_EXIT} is ignored: "
                           f"{names.REMOVED_ENV[names.ENV_DELETE_ON_EXIT]}")
    assert [r.getMessage() for r in caplog.records] == warnings


def test_the_settings_are_shown_all_but_the_password_and_cannot_be_changed() -> None:
    cfg = config.resolve(env={names.ENV_NODENAME: "node-7"}, pushgateway="http://gw:9091",
                         experiment="e", trial="t", username="u", password="s3cret")
    shown = repr(cfg)
    assert "pushgateway='http://gw:9091'" in shown
    assert "nodename='node-7'" in shown and "username='u'" in shown
    assert "password" not in shown and "s3cret" not in shown
    assert_frozen(cfg)
    assert_frozen(cfg.profile)


def test_the_profile_size_is_documented_in_mebibytes() -> None:
    assert config._mebibytes(200 * 2**20) == "`200`"
    assert config._mebibytes(3 * 2**19) == "`1.5`"


@pytest.mark.parametrize("served", [{names.ENV_PULL_PORT: "9123"},
                                    {names.ENV_PUSHGATEWAY: "http://127.0.0.1:9091"}])
def test_serving_or_pushing_alone_needs_the_experiment_and_the_trial(served: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="^experiment is required when pushing or serving"):
        config.resolve(env=served)
    with pytest.raises(ValueError, match="^trial is required when pushing or serving"):
        config.resolve(env={**served, names.ENV_EXPERIMENT: "e"})
    named = config.resolve(env={**served, names.ENV_EXPERIMENT: "e", names.ENV_TRIAL: "t"})
    assert (named.experiment, named.trial) == ("e", "t")
    assert config.resolve(env={}).experiment == ""  # neither: nothing is required
