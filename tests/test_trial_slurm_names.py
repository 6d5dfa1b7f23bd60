"""Under Slurm a trial that names nothing is named from its job: experiment from
SLURM_JOB_NAME, trial from SLURM_JOB_ID, with the precedence of every other default (an
argument, then trainwatch's variable, then Slurm's)."""

from __future__ import annotations

import pytest

from trial_instrumentation import config, names

GATEWAY = {names.ENV_PUSHGATEWAY: "http://127.0.0.1:9"}
SLURM = {"SLURM_JOB_NAME": "bert-large", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "1",
         "SLURM_NTASKS": "2"}


def test_an_unnamed_trial_under_slurm_is_the_jobs_name_and_id() -> None:
    cfg = config.resolve(env={**GATEWAY, **SLURM})
    assert cfg.grouping_key == {"experiment": "bert-large", "trial": "4242", "rank": "1"}
    assert (cfg.world_size, cfg.slurm_job_id) == (2, "4242")


def test_trainwatchs_variables_win_over_slurms_and_arguments_over_both() -> None:
    env = {**GATEWAY, **SLURM, names.ENV_EXPERIMENT: "exp", names.ENV_TRIAL: "tri"}
    assert config.resolve(env=env).grouping_key["experiment"] == "exp"
    assert config.resolve(env=env).grouping_key["trial"] == "tri"
    given = config.resolve(env=env, experiment="arg-exp", trial="arg-tri")
    assert (given.experiment, given.trial) == ("arg-exp", "arg-tri")
    # The job id stays the job's, whatever the trial is called.
    assert given.slurm_job_id == "4242"


def test_a_slash_in_the_jobs_name_is_mended_but_one_the_user_wrote_is_refused() -> None:
    env = {**GATEWAY, **SLURM, "SLURM_JOB_NAME": "team/" + "x" * 300}
    experiment = config.resolve(env=env).experiment
    assert experiment.startswith("team-x") and len(experiment) == names.MAX_LABEL_LENGTH
    with pytest.raises(ValueError, match=f"environment variable {names.ENV_EXPERIMENT}"):
        config.resolve(env={**env, names.ENV_EXPERIMENT: "team/a"})


def test_without_slurm_or_names_pushing_still_asks_for_them() -> None:
    with pytest.raises(ValueError, match="experiment is required"):
        config.resolve(env=GATEWAY)
    blank = {**GATEWAY, "SLURM_JOB_NAME": "  ", "SLURM_JOB_ID": ""}
    with pytest.raises(ValueError, match="experiment is required"):
        config.resolve(env=blank)
    # Unconfigured (no Pushgateway, no pull port), Slurm's names change nothing that matters.
    assert not config.resolve(env=SLURM).enabled
