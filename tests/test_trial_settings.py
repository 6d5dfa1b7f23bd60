"""Each trial setting is declared once (trial_instrumentation/config.py): Trial(...) takes
exactly the declared arguments, the environment variables are the declared ones, and the
documentation's table is the one written from the declarations."""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import fields

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO
from trial_instrumentation import config, names, settings_doc


def test_trial_takes_exactly_the_declared_arguments_and_defaults_none_of_them() -> None:
    parameters = list(inspect.signature(ti.Trial).parameters.values())
    assert tuple(p.name for p in parameters) == (
        "experiment", "trial", "pushgateway", "push_interval",
        *[a for a in config.arguments()
          if a not in ("experiment", "trial", "pushgateway", "push_interval")])
    assert set(config.arguments()) == {p.name for p in parameters}
    # None is "not given": a default written here would be a second one.
    assert {p.name: p.default for p in parameters if p.default is not None} == {}


def test_every_library_variable_is_a_settings_and_every_settings_variable_is_known() -> None:
    declared = {s.metadata[key] for s in config.settings() for key in ("env", "fallback")} - {None}
    assert {v for v in declared if v.startswith("TRAINWATCH_")} == set(names.TRIAL_ENV)
    # torchrun's, and Slurm's (the job, and the ranks where torchrun's are absent).
    assert declared - set(names.TRIAL_ENV) == {
        names.ENV_RANK, names.ENV_WORLD_SIZE, names.ENV_LOCAL_RANK, names.ENV_SLURM_RANK,
        names.ENV_SLURM_WORLD_SIZE, names.ENV_SLURM_LOCAL_RANK, names.ENV_SLURM_JOB_ID,
        names.ENV_SLURM_JOB_USER, names.ENV_SLURM_JOB_NAME}


def test_a_declared_default_is_what_an_unset_setting_resolves_to() -> None:
    resolved = config.resolve(env={})
    for setting in config.settings():
        owner = resolved.profile if setting in fields(config.ProfileSettings) else resolved
        assert getattr(owner, setting.name) == config.default_of(setting), setting.name
    assert config.resolve(env={}, buckets=[0.5, 1]).phase_buckets == (0.5, 1.0)


def test_each_variable_sets_its_setting() -> None:
    base = {names.ENV_PUSHGATEWAY: "http://gw:9091", names.ENV_EXPERIMENT: "e",
            names.ENV_TRIAL: "t"}
    resolved = config.resolve(env={**base, names.ENV_PROFILE_MAX_MB: "1",
                                   names.ENV_PROFILE_SIGNAL: "USR1",
                                   names.ENV_PRECISION: "bf16",
                                   names.ENV_FLOPS_PER_SAMPLE: "6e9"})
    assert (resolved.profile.max_bytes, resolved.profile.signal) == (2**20, 10)
    assert (resolved.flops_per_sample, resolved.precision) == (6e9, "bf16")


def test_resolve_refuses_a_setting_that_is_not_an_argument() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'nodename'"):
        config.resolve(env={}, nodename="n")


def test_the_documented_table_is_the_one_written_from_the_declarations() -> None:
    done = subprocess.run([sys.executable, "-m", "trial_instrumentation.settings_doc", "--check"],
                          check=False, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (REPO / settings_doc.DOC).read_text()
    assert settings_doc.table() in text
    for setting in config.settings():
        assert f"| {settings_doc.shown(setting)} | {setting.metadata['doc']} |" in text
