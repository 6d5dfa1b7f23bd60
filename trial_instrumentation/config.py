"""Trial settings from arguments or the environment, validated once, at Trial creation.

Every problem is a ``ValueError`` that names the argument or environment variable it came
from, so a typo fails before the first step instead of mid-training.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import signal
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from trial_instrumentation import flops, names
from trial_instrumentation.durations import parse_duration
from trial_instrumentation.timing import validate_buckets

V = TypeVar("V")
log = logging.getLogger(__name__)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
# NVML's UUID form: GPU-<hex and dashes>, or MIG-<...> for a MIG instance.
_NVML_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


@dataclass(frozen=True)
class ProfileSettings:
    """On-demand profiler traces (:mod:`trial_instrumentation.profiling`); environment only."""

    directory: str = "trainwatch-traces"  # relative: to the working directory
    trigger: str | None = None  # a file whose change asks for a trace; None: no file
    signal: int | None = signal.SIGUSR2  # None: no signal asks
    steps: int = 5  # steps a request records (after the warm-up), unless it says
    max_bytes: int = 200 * 1024 * 1024  # the compressed trace is cut to this


@dataclass(frozen=True)
class TrialConfig:
    """Resolved settings; ``enabled`` is False when neither pushing nor pulling is set up."""

    pushgateway: str | None
    pull_port: int | None
    experiment: str
    trial: str
    rank: int
    world_size: int
    local_rank: int | None
    gpu_uuids: tuple[str, ...]  # given by the user; empty: detect through torch
    nodename: str
    push_interval: float
    timing_mode: str
    buckets: tuple[float, ...]
    phase_buckets: tuple[float, ...]  # () : the phases push their sums and counts only
    username: str | None
    password: str | None = field(repr=False)
    connect_timeout: float
    read_timeout: float
    exit_timeout: float
    flops_per_sample: float | None = None  # the model's training FLOPs per sample
    precision: str | None = None  # the precision flops_per_sample runs in (flops.PRECISIONS)
    profile: ProfileSettings = ProfileSettings()

    @property
    def enabled(self) -> bool:
        return self.pushgateway is not None or self.pull_port is not None

    @property
    def grouping_key(self) -> dict[str, str]:
        return {"experiment": self.experiment, "trial": self.trial, "rank": str(self.rank)}


class _Source:
    """Picks each setting from its argument, else its environment variable, else a default."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, arg: object, arg_name: str, env_name: str | None,
            parse: Callable[[str], V], default: V) -> tuple[V, str]:
        if arg is not None:
            return self._parse(parse, arg, f"argument {arg_name}="), f"argument {arg_name}="
        raw = self.env.get(env_name, "") if env_name else ""
        if raw.strip() == "":
            return default, f"argument {arg_name}="
        where = f"environment variable {env_name}"
        return self._parse(parse, raw.strip(), where), where

    @staticmethod
    def _parse(parse: Callable[[str], V], value: object, where: str) -> V:
        try:
            return parse(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: invalid value {value!r} ({exc})") from None


def _url(value: str) -> str:
    parts = urllib.parse.urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host, "
                         "like http://pushgateway:9091")
    parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    return str(value).rstrip("/")


def _positive(value: str | float) -> float:
    number = parse_duration(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a duration > 0: seconds (10) or with a unit (10s, 1m)")
    return number


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


def _bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in _TRUE | _FALSE:
        return str(value).lower() in _TRUE
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")


def _int_at_least(minimum: int) -> Callable[[str | int], int]:
    def parse(value: str | int) -> int:
        if isinstance(value, bool) or int(value) != float(value) or int(value) < minimum:
            raise ValueError(f"must be an integer >= {minimum}")
        return int(value)
    return parse


def _port(value: str | int) -> int:
    port = _int_at_least(0)(value)
    if port > 65535:
        raise ValueError("must be a TCP port, 0..65535 (0: any free port)")
    return port


def _label(value: str) -> str:
    text = str(value)
    if not text or "/" in text:
        raise ValueError("a grouping-key label value must be non-empty and contain no '/'")
    return text


def _gpu_uuids(value: str | Iterable[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    uuids = tuple(sorted({str(item).strip() for item in items} - {""}))
    if bad := [u for u in uuids if not _NVML_UUID.match(u)]:
        raise ValueError(f"expected NVML UUIDs like GPU-8c9b1f3e-..., "
                         f"as nvidia-smi -L prints them, not {bad}")
    return uuids


def _phase_buckets(value: str | Iterable[float]) -> tuple[float, ...]:
    """``"none"`` or an empty sequence: no bounds (sums and counts only); else the bounds.

    >>> _phase_buckets("none"), _phase_buckets("0.01, 0.1,1"), _phase_buckets([])
    ((), (0.01, 0.1, 1.0), ())
    """
    if isinstance(value, str):
        if value.strip().lower() == names.PHASE_BUCKETS_NONE:
            return ()
        try:
            value = [float(v) for v in value.split(",")]
        except ValueError:
            raise ValueError(f"expected {names.PHASE_BUCKETS_NONE!r} or comma-separated "
                             "bucket bounds in seconds") from None
    bounds = tuple(value)
    return validate_buckets(bounds, "the bounds") if bounds else ()


MAX_PROFILE_STEPS = 100  # a trace of more steps is too large to open in a browser


def profile_steps(value: str | int) -> int:
    """Steps one profiler capture records: an integer 1..MAX_PROFILE_STEPS."""
    steps = _int_at_least(1)(value)
    if steps > MAX_PROFILE_STEPS:
        raise ValueError(f"must be at most {MAX_PROFILE_STEPS}")
    return steps


def _signal(value: str) -> int | None:
    """``none``, or a signal's name (``USR2``, ``SIGUSR1``) or number."""
    text = str(value).strip().upper()
    if text == "NONE":
        return None
    try:
        if text.isdigit():
            return int(signal.Signals(int(text)))
        return int(signal.Signals[text if text.startswith("SIG") else f"SIG{text}"])
    except KeyError:
        raise ValueError("expected 'none' or a signal's name (USR2) or number") from None


def _megabytes(value: str) -> int:
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a size in MB > 0")
    return int(number * 1024 * 1024)


def _profile_settings(src: _Source) -> ProfileSettings:
    default = ProfileSettings()
    return ProfileSettings(
        directory=src.get(None, "profile_dir", names.ENV_PROFILE_DIR, str, default.directory)[0],
        trigger=src.get(None, "profile_trigger", names.ENV_PROFILE_TRIGGER, str, None)[0],
        signal=src.get(None, "profile_signal", names.ENV_PROFILE_SIGNAL, _signal,
                       default.signal)[0],
        steps=src.get(None, "profile_steps", names.ENV_PROFILE_STEPS, profile_steps,
                      default.steps)[0],
        max_bytes=src.get(None, "profile_max_mb", names.ENV_PROFILE_MAX_MB, _megabytes,
                          default.max_bytes)[0])


def _timing_mode(value: str) -> str:
    if value not in names.TIMING_MODES:
        raise ValueError(f"expected one of {list(names.TIMING_MODES)}")
    return value


def resolve(*, pushgateway: str | None = None, pull_port: int | None = None,
            experiment: str | None = None, trial: str | None = None, rank: int | None = None,
            world_size: int | None = None, local_rank: int | None = None,
            gpu_uuids: str | Iterable[str] | None = None,
            push_interval: float | str | None = None,
            timing_mode: str | None = None, buckets: Iterable[float] | None = None,
            phase_buckets: str | Iterable[float] | None = None,
            username: str | None = None, password: str | None = None,
            connect_timeout: float | str = 2.0, read_timeout: float | str = 5.0,
            exit_timeout: float | str = 10.0,
            flops_per_sample: float | str | None = None, precision: str | None = None,
            env: Mapping[str, str] | None = None) -> TrialConfig:
    """Validate the arguments of :class:`~trial_instrumentation.Trial`, filling gaps from env."""
    src = _Source(os.environ if env is None else env)
    warn_unknown_variables(src.env)
    gateway, gateway_from = src.get(pushgateway, "pushgateway", names.ENV_PUSHGATEWAY, _url, None)
    if gateway is not None:
        _warn_metrics_path(gateway, gateway_from)
    port, _ = src.get(pull_port, "pull_port", names.ENV_PULL_PORT, _port, None)
    if gateway is not None and port is not None:
        raise ValueError(f"set either a Pushgateway ({names.ENV_PUSHGATEWAY}) or a pull port "
                         f"({names.ENV_PULL_PORT}), not both")
    enabled = gateway is not None or port is not None
    labels = {}
    for arg, arg_name, env_name in ((experiment, "experiment", names.ENV_EXPERIMENT),
                                    (trial, "trial", names.ENV_TRIAL)):
        labels[arg_name], _ = src.get(arg, arg_name, env_name, _label, "")
        if enabled and not labels[arg_name]:
            raise ValueError(f"{arg_name} is required when pushing or serving metrics: "
                             f"pass {arg_name}= or set {env_name}")
    rank_value, _ = src.get(rank, "rank", names.ENV_RANK, _int_at_least(0), 0)
    world, where = src.get(world_size, "world_size", names.ENV_WORLD_SIZE, _int_at_least(1), 1)
    if rank_value >= world:
        raise ValueError(f"{where}: rank {rank_value} is not below world size {world}")
    user, _ = src.get(username, "username", names.ENV_USERNAME, str, None)
    secret, _ = src.get(password, "password", names.ENV_PASSWORD, str, None)
    if (user is None) != (secret is None):
        raise ValueError(f"basic auth needs both a username and a password "
                         f"({names.ENV_USERNAME}, {names.ENV_PASSWORD})")
    model_flops, _ = src.get(flops_per_sample, "flops_per_sample", names.ENV_FLOPS_PER_SAMPLE,
                             flops.flops_per_sample, None)
    model_precision, _ = src.get(precision, "precision", names.ENV_PRECISION, flops.precision,
                                 None)
    if model_flops is not None and model_precision is None:
        raise ValueError(f"argument precision= is required with flops_per_sample= (or "
                         f"{names.ENV_PRECISION}; one of "
                         f"{', '.join(flops.PRECISIONS)}): the peak it is compared with "
                         "depends on it")
    step_buckets = (names.DEFAULT_BUCKETS if buckets is None
                    else validate_buckets(buckets, "argument buckets="))
    return TrialConfig(
        pushgateway=gateway, pull_port=port,
        experiment=labels["experiment"], trial=labels["trial"],
        rank=rank_value, world_size=world,
        local_rank=src.get(local_rank, "local_rank", names.ENV_LOCAL_RANK, _int_at_least(0),
                           None)[0],
        gpu_uuids=src.get(gpu_uuids, "gpu_uuids", names.ENV_GPU_UUIDS, _gpu_uuids,
                          tuple[str, ...]())[0],
        nodename=src.get(None, "nodename", names.ENV_NODENAME, str, os.uname().nodename)[0],
        push_interval=src.get(push_interval, "push_interval", names.ENV_PUSH_INTERVAL,
                              _positive, 10.0)[0],
        timing_mode=src.get(timing_mode, "timing_mode", names.ENV_TIMING_MODE,
                            _timing_mode, names.WALL)[0],
        buckets=step_buckets,
        phase_buckets=src.get(phase_buckets, "phase_buckets", names.ENV_PHASE_BUCKETS,
                              _phase_buckets, step_buckets)[0],
        username=user, password=secret,
        connect_timeout=src.get(connect_timeout, "connect_timeout", None, _positive, 2.0)[0],
        read_timeout=src.get(read_timeout, "read_timeout", None, _positive, 5.0)[0],
        exit_timeout=src.get(exit_timeout, "exit_timeout", None, _positive, 10.0)[0],
        flops_per_sample=model_flops, precision=model_precision,
        profile=_profile_settings(src),
    )
