"""Trial settings, each declared once, and their resolution from arguments or the environment,
validated once, at Trial creation.

Every setting is a field of :class:`TrialConfig` (or of :class:`ProfileSettings`, environment
only) declared with :func:`_setting`: its type, default, environment variable, parser and the
line the documentation shows. :func:`resolve` reads the fields, ``Trial(...)`` passes its
arguments through, and docs/instrumentation.md's settings table is written from them
(``python -m trial_instrumentation.settings_doc``). A new setting is one field here, plus its
``ENV_*`` name in names.py when the environment sets it.

Every problem is a ``ValueError`` that names the argument or environment variable it came
from, so a typo fails before the first step instead of mid-training.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import signal
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from trial_instrumentation import flops, names, parsers
from trial_instrumentation.durations import parse_duration
from trial_instrumentation.parsers import MAX_PROFILE_STEPS, profile_steps

__all__ = ["MAX_PROFILE_STEPS", "ProfileSettings", "TrialConfig", "arguments", "parse_duration",
           "profile_steps", "resolve", "settings", "warn_unknown_variables"]
log = logging.getLogger(__name__)


def _setting(default: Any, parse: Callable[[Any], Any], doc: str, *, env: str | None = None,
             argument: bool = True, required: bool = False, default_from: str | None = None,
             shown: str | Callable[[Any], str] | None = None, secret: bool = False,
             fallback: str | None = None,
             fallback_parse: Callable[[Any], Any] | None = None) -> Any:
    """One setting: ``parse`` turns an argument or the variable ``env``'s text into its value
    (else ``fallback``'s, a scheduler's variable read where ``env`` is unset or empty, parsed
    by ``fallback_parse`` where given: a value the user did not write for us is mended, not
    refused);
    ``argument``: ``Trial(...)`` takes it; ``required``: needed when pushing or serving;
    ``default_from``: the default is that (earlier) setting's value; ``shown``: the default as
    the documentation writes it (text, or a function of the default)."""
    meta = {"parse": parse, "doc": doc, "env": env, "argument": argument, "required": required,
            "default_from": default_from, "shown": shown, "fallback": fallback,
            "fallback_parse": fallback_parse}
    if callable(default):
        return field(default_factory=default, metadata=meta, repr=not secret)
    return field(default=default, metadata=meta, repr=not secret)


def _mebibytes(size: int) -> str:
    return f"`{size / 2**20:g}`"


def _signal_name(number: int | None) -> str:
    return "`none`" if number is None else f"`{signal.Signals(number).name.removeprefix('SIG')}`"


@dataclass(frozen=True)
class ProfileSettings:
    """On-demand profiler traces (:mod:`trial_instrumentation.profiling`); environment only."""

    directory: str = _setting(
        "trainwatch-traces", str, "where on-demand profiler traces go, under "
        "`<experiment>/<trial>/` (a relative path: in the working directory; below)",
        env=names.ENV_PROFILE_DIR, argument=False)
    trigger: str | None = _setting(
        None, str, "a file whose change (`touch`, or a step count written into it) asks for a "
        "trace; checked at each push", env=names.ENV_PROFILE_TRIGGER, argument=False)
    signal: int | None = _setting(
        signal.SIGUSR2, parsers.signal_number, "the signal that asks for a trace (a name or "
        "number), or `none`", env=names.ENV_PROFILE_SIGNAL, argument=False, shown=_signal_name)
    steps: int = _setting(
        5, profile_steps, f"steps a trace records after its 2 warm-up steps (1 to "
        f"{MAX_PROFILE_STEPS})", env=names.ENV_PROFILE_STEPS, argument=False)
    max_bytes: int = _setting(
        200 * 1024 * 1024, parsers.megabytes, "a compressed trace larger than this many MB is "
        "cut (its earliest events kept)", env=names.ENV_PROFILE_MAX_MB, argument=False,
        shown=_mebibytes)


_LABEL = f"grouping key label (at most {names.MAX_LABEL_LENGTH} characters, no `/`)"
_BUCKETS_SHOWN = (f"{names.DEFAULT_BUCKETS[0] * 1000:g} ms doubling to "
                  f"{names.DEFAULT_BUCKETS[-1]:g} s ({len(names.DEFAULT_BUCKETS)} bounds)")


@dataclass(frozen=True)
class TrialConfig:
    """Resolved settings; ``enabled`` is False when neither pushing nor pulling is set up."""

    pushgateway: str | None = _setting(
        None, parsers.url, "`http(s)://host:port[/prefix]` of the Pushgateway",
        env=names.ENV_PUSHGATEWAY)
    pull_port: int | None = _setting(
        None, parsers.port, "serve `/metrics` on this port instead of pushing (`0`: any free "
        "port)", env=names.ENV_PULL_PORT)
    experiment: str = _setting(
        "", parsers.label, f"{_LABEL}; under Slurm, the job's name (`/` written `-`)",
        env=names.ENV_EXPERIMENT, required=True, fallback=names.ENV_SLURM_JOB_NAME,
        fallback_parse=parsers.scheduler_label)
    trial: str = _setting(
        "", parsers.label, f"{_LABEL}; under Slurm, the job's id, which every task of the job "
        "shares", env=names.ENV_TRIAL, required=True, fallback=names.ENV_SLURM_JOB_ID,
        fallback_parse=parsers.scheduler_label)
    rank: int = _setting(0, parsers.label_int(0), "grouping key `rank` (torchrun sets it, "
                         "else Slurm's task id under `srun`)", env=names.ENV_RANK,
                         fallback=names.ENV_SLURM_RANK)
    world_size: int = _setting(
        1, parsers.label_int(1), "the trial's ranks, `trainwatch_trial_info{world_size}` "
        "(torchrun sets it, else Slurm's task count)", env=names.ENV_WORLD_SIZE,
        fallback=names.ENV_SLURM_WORLD_SIZE)
    local_rank: int | None = _setting(
        None, parsers.int_at_least(0), "the GPU this rank reports while it has not yet "
        "allocated on one (torchrun sets it, else Slurm's task id on the node; below)",
        env=names.ENV_LOCAL_RANK, fallback=names.ENV_SLURM_LOCAL_RANK)
    gpu_uuids: tuple[str, ...] = _setting(
        (), parsers.gpu_uuids, "the GPUs this trial uses, as NVML UUIDs (`nvidia-smi -L`), "
        "comma-separated; replaces detection through torch (JAX, TensorFlow, or a scheduler "
        "that knows the allocation)", env=names.ENV_GPU_UUIDS, shown="unset")
    nodename: str = _setting(
        lambda: os.uname().nodename, parsers.label_value, "host name for the join to the "
        "exporter (below)", env=names.ENV_NODENAME, argument=False, shown="`uname -n`")
    k8s_namespace: str = _setting(
        "", parsers.label_value, "the Kubernetes namespace the trial runs in, "
        "`trainwatch_trial_info{k8s_namespace}` (downward API `metadata.namespace`; below)",
        env=names.ENV_K8S_NAMESPACE, argument=False, shown="unset")
    k8s_pod: str = _setting(
        "", parsers.label_value, "the trial's Kubernetes pod, `trainwatch_trial_info{k8s_pod}` "
        "(downward API `metadata.name`; below)", env=names.ENV_K8S_POD, argument=False,
        shown="unset")
    slurm_job_id: str = _setting(
        "", parsers.label_value, "the Slurm job the trial runs in, "
        "`trainwatch_trial_info{slurm_job_id}` (Slurm sets it)", env=names.ENV_SLURM_JOB_ID,
        argument=False, shown="unset")
    slurm_job_user: str = _setting(
        "", parsers.label_value, "the user who submitted that job, "
        "`trainwatch_trial_info{slurm_job_user}` (Slurm sets it)",
        env=names.ENV_SLURM_JOB_USER, argument=False, shown="unset")
    push_interval: float = _setting(
        10.0, parsers.push_interval, "time between pushes: seconds (`10`, `2.5`) or with a "
        f"unit (`10s`, `1m`, `1m30s`, `500ms`), at least `{names.MIN_PUSH_INTERVAL:g}`; the "
        "first push is at start",
        env=names.ENV_PUSH_INTERVAL)
    timing_mode: str = _setting(
        names.WALL, parsers.timing_mode, f"{', '.join(f'`{m}`' for m in names.TIMING_MODES)} "
        "(below)", env=names.ENV_TIMING_MODE)
    buckets: tuple[float, ...] = _setting(
        names.DEFAULT_BUCKETS, parsers.buckets, "the step histogram's upper bounds in seconds",
        shown=_BUCKETS_SHOWN)
    phase_buckets: tuple[float, ...] = _setting(
        names.DEFAULT_BUCKETS, parsers.phase_buckets, "the phase histograms' bounds: "
        "comma-separated seconds, or `none` for their sums and counts only (one `+Inf` "
        "bucket): the fleet-scale setting (below)", env=names.ENV_PHASE_BUCKETS,
        default_from="buckets", shown="the step histogram's `buckets`")
    username: str | None = _setting(None, str, "HTTP basic auth (both or neither)",
                                    env=names.ENV_USERNAME)
    password: str | None = _setting(None, str, "HTTP basic auth (both or neither)",
                                    env=names.ENV_PASSWORD, secret=True)
    connect_timeout: float = _setting(
        2.0, parsers.positive_duration, "the time a push may take to connect (a duration)")
    read_timeout: float = _setting(
        5.0, parsers.positive_duration, "the time a push may wait for the Pushgateway's answer "
        "(a duration)")
    exit_timeout: float = _setting(
        10.0, parsers.positive_duration, "the time the final push may take at exit (a "
        "duration)")
    flops_per_sample: float | None = _setting(
        None, flops.flops_per_sample, "the model's training FLOPs per sample (forward and "
        "backward), for MFU", env=names.ENV_FLOPS_PER_SAMPLE)
    precision: str | None = _setting(
        None, flops.precision, f"the precision those FLOPs run in "
        f"({', '.join(f'`{p}`' for p in flops.PRECISIONS)}); required with the FLOPs",
        env=names.ENV_PRECISION)
    profile: ProfileSettings = field(default_factory=ProfileSettings)

    @property
    def enabled(self) -> bool:
        return self.pushgateway is not None or self.pull_port is not None

    @property
    def grouping_key(self) -> dict[str, str]:
        return {"experiment": self.experiment, "trial": self.trial, "rank": str(self.rank)}


def settings() -> list[Field[Any]]:
    """Every setting, in the documentation's order: the trial's, then the profiler's."""
    return ([f for f in fields(TrialConfig) if f.metadata]
            + [f for f in fields(ProfileSettings) if f.metadata])


def arguments() -> tuple[str, ...]:
    """The settings ``Trial(...)`` takes as arguments, in declaration order."""
    return tuple(f.name for f in settings() if f.metadata["argument"])


def default_of(setting: Field[Any]) -> Any:
    """The declared default (a factory's value)."""
    return setting.default_factory() if callable(setting.default_factory) else setting.default


class _Source:
    """Picks each setting from its argument, else its environment variable, else a default."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, setting: Field[Any], arg: object, default: Any) -> tuple[Any, str]:
        """The setting's value and where it came from (``argument name=`` for a default)."""
        parse = setting.metadata["parse"]
        argument = f"argument {setting.name}="
        if arg is not None:
            return self._parse(parse, arg, argument), argument
        variables = [v for v in (setting.metadata["env"], setting.metadata["fallback"]) if v]
        env_name = next((v for v in variables if self.env.get(v, "").strip()), None)
        if env_name is None:
            return default, argument
        raw = self.env[env_name]
        where = f"environment variable {env_name}"
        if env_name != setting.metadata["env"]:
            parse = setting.metadata["fallback_parse"] or parse
        return self._parse(parse, raw.strip(), where), where

    @staticmethod
    def _parse(parse: Callable[[Any], Any], value: object, where: str) -> Any:
        try:
            return parse(value)
        except parsers.NamedError:
            raise
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: invalid value {parsers.shown(value)} ({exc})") from None

    def read(self, cls: type, given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The values of ``cls``'s settings, and where each came from."""
        values: dict[str, Any] = {}
        where: dict[str, str] = {}
        for setting in fields(cls):
            if not setting.metadata:
                continue
            source = setting.metadata["default_from"]
            default = values[source] if source else default_of(setting)
            values[setting.name], where[setting.name] = self.get(
                setting, given.get(setting.name), default)
        return values, where


def warn_unknown_variables(env: Mapping[str, str]) -> list[str]:
    """Log (and return) one warning per ``TRAINWATCH_*`` variable nobody reads, naming the
    closest known one: a misspelt Pushgateway variable would otherwise leave the trial a silent
    no-op."""
    known, prefix = (*names.TRIAL_ENV, *names.OTHER_ENV), "TRAINWATCH_"
    warnings = []
    for name in sorted(env):
        if name in names.REMOVED_ENV:
            warnings.append(f"trainwatch: {name} is ignored: {names.REMOVED_ENV[name]}")
            log.warning("%s", warnings[-1])
            continue
        if not name.startswith(prefix) or name in known:
            continue
        # Compared without the shared prefix, which would make every name look alike.
        close = difflib.get_close_matches(name[len(prefix):], [k[len(prefix):] for k in known],
                                          n=1, cutoff=0.6)
        hint = (f"did you mean {prefix}{close[0]}?" if close
                else f"known: {', '.join(names.TRIAL_ENV)}")
        warnings.append(f"trainwatch: unknown environment variable {name}, ignored ({hint})")
        log.warning("%s", warnings[-1])
    return warnings


def _warn_metrics_path(gateway: str, where: str) -> None:
    """prometheus_client appends /metrics/job/... to the URL: a URL that already ends in the
    Pushgateway's /metrics path gets 404 on every push."""
    parts = urllib.parse.urlsplit(gateway)
    if re.search(r"/metrics(/|$)", parts.path):
        base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        log.warning("trainwatch: %s: the Pushgateway URL %s has the path %s; pushes go to "
                    "<URL>/metrics/job/%s/..., so they will be answered 404. Give the "
                    "Pushgateway's base URL, e.g. %s", where, gateway, parts.path, names.JOB, base)


def _check_together(values: Mapping[str, Any], where: Mapping[str, str]) -> None:
    """What no setting can check alone: the settings that need or exclude each other."""
    if values["pushgateway"] is not None:
        _warn_metrics_path(values["pushgateway"], where["pushgateway"])
    if values["pushgateway"] is not None and values["pull_port"] is not None:
        raise ValueError(f"set either a Pushgateway ({names.ENV_PUSHGATEWAY}) or a pull port "
                         f"({names.ENV_PULL_PORT}), not both")
    if values["pushgateway"] is not None or values["pull_port"] is not None:
        for setting in fields(TrialConfig):
            if setting.metadata.get("required") and not values[setting.name]:
                raise ValueError(f"{setting.name} is required when pushing or serving metrics: "
                                 f"pass {setting.name}= or set {setting.metadata['env']}")
    if values["rank"] >= values["world_size"]:
        raise ValueError(f"{where['world_size']}: rank {values['rank']} is not below world size "
                         f"{values['world_size']}")
    if (values["username"] is None) != (values["password"] is None):
        raise ValueError(f"basic auth needs both a username and a password "
                         f"({names.ENV_USERNAME}, {names.ENV_PASSWORD})")
    if values["flops_per_sample"] is not None and values["precision"] is None:
        raise ValueError(f"argument precision= is required with flops_per_sample= (or "
                         f"{names.ENV_PRECISION}; one of "
                         f"{', '.join(flops.PRECISIONS)}): the peak it is compared with "
                         "depends on it")


def resolve(*, env: Mapping[str, str] | None = None, **given: Any) -> TrialConfig:
    """Validate the arguments of :class:`~trial_instrumentation.Trial` (those of
    :func:`arguments`; ``None``: not given), filling gaps from ``env`` (default: the process's
    environment), else from the declared defaults."""
    if unknown := sorted(set(given) - set(arguments())):
        raise TypeError(f"resolve() got an unexpected keyword argument {unknown[0]!r}")
    src = _Source(os.environ if env is None else env)
    warn_unknown_variables(src.env)
    values, where = src.read(TrialConfig, given)
    _check_together(values, where)
    profile, _ = src.read(ProfileSettings, {})
    return TrialConfig(**values, profile=ProfileSettings(**profile))
