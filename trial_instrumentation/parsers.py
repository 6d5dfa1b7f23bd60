"""The parsers of trial settings (trial_instrumentation.config): each takes the argument's value
or the environment variable's text and returns the setting's value, or raises ``ValueError``
saying what it expected; the caller names the argument or variable.

>>> phase_buckets("none"), phase_buckets("0.01, 0.1,1"), phase_buckets([])
((), (0.01, 0.1, 1.0), ())
>>> shown("x" * 1000)
"'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (1000 characters)"
"""

from __future__ import annotations

import math
import re
import signal
import urllib.parse
from collections.abc import Callable, Iterable

from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration
from trial_instrumentation.timing import validate_buckets

# NVML's UUID form: GPU-<hex and dashes>, or MIG-<...> for a MIG instance.
_NVML_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")
MAX_PROFILE_STEPS = 100  # a trace of more steps is too large to open in a browser
SHOWN_CHARACTERS = 48  # of a value quoted in a message: a 10 MB name is one short line


class NamedError(ValueError):
    """A parser's error whose message already names the argument: shown as it is."""


def shown(value: object) -> str:
    """``repr(value)``, a long string cut to its first characters and its length."""
    if isinstance(value, str) and len(value) > SHOWN_CHARACTERS:
        return f"{value[:SHOWN_CHARACTERS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS]}..."


def _bounded(text: str) -> str:
    if len(text) > names.MAX_LABEL_LENGTH:
        raise ValueError(f"a label value must be at most {names.MAX_LABEL_LENGTH} characters "
                         f"(names.MAX_LABEL_LENGTH), not {len(text)}")
    return text


def url(value: str) -> str:
    parts = urllib.parse.urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host, "
                         "like http://pushgateway:9091")
    parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    return str(value).rstrip("/")


def positive_duration(value: str | float) -> float:
    number = parse_duration(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a duration > 0: seconds (10) or with a unit (10s, 1m)")
    return number


def push_interval(value: str | float) -> float:
    """A duration of at least ``names.MIN_PUSH_INTERVAL``."""
    number = positive_duration(value)
    if number < names.MIN_PUSH_INTERVAL:
        raise ValueError(f"must be at least {names.MIN_PUSH_INTERVAL:g}s "
                         "(names.MIN_PUSH_INTERVAL): every push collects and sends the whole "
                         "group")
    return number


def int_at_least(minimum: int) -> Callable[[str | int], int]:
    def parse(value: str | int) -> int:
        try:  # text: an integer literal; a number: a whole one (exact, whatever its size)
            number = int(value)
            whole = not isinstance(value, bool) and (isinstance(value, str) or number == value)
        except OverflowError:  # inf
            whole = False
        if not whole or number < minimum:
            raise ValueError(f"must be an integer >= {minimum}")
        return number
    return parse


def label_int(minimum: int) -> Callable[[str | int], int]:
    """An integer >= ``minimum`` pushed as a label value (``rank``, ``world_size``)."""
    def parse(value: str | int) -> int:
        number = int_at_least(minimum)(value)
        _bounded(str(number))
        return number
    return parse


def port(value: str | int) -> int:
    number = int_at_least(0)(value)
    if number > 65535:
        raise ValueError("must be a TCP port, 0..65535 (0: any free port)")
    return number


def label(value: str) -> str:
    text = str(value)
    if not text or "/" in text:
        raise ValueError("a grouping-key label value must be non-empty and contain no '/'")
    return _bounded(text)


def scheduler_label(value: str) -> str:
    """A grouping-key label value from a scheduler's variable (Slurm's job name or id): each
    ``/`` written ``-`` and cut to names.MAX_LABEL_LENGTH, as ``trainwatch run`` names a trial
    (trial_instrumentation/auto/naming.py); a name nobody wrote for trainwatch is not refused."""
    return label(str(value).replace("/", "-")[:names.MAX_LABEL_LENGTH])


def label_value(value: str) -> str:
    """Any text pushed as a label value (the node name): at most names.MAX_LABEL_LENGTH."""
    return _bounded(str(value))


def gpu_uuids(value: str | Iterable[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    uuids = tuple(sorted({str(item).strip() for item in items} - {""}))
    if bad := [u for u in uuids if not _NVML_UUID.match(u)]:
        raise ValueError(f"expected NVML UUIDs like GPU-8c9b1f3e-..., "
                         f"as nvidia-smi -L prints them, not {shown(bad)}")
    for uuid in uuids:
        _bounded(uuid)
    return uuids


def timing_mode(value: str) -> str:
    if value not in names.TIMING_MODES:
        raise ValueError(f"expected one of {list(names.TIMING_MODES)}")
    return value


def buckets(value: Iterable[float]) -> tuple[float, ...]:
    """The step histogram's bounds (an argument only)."""
    try:
        return validate_buckets(value, "argument buckets=")
    except ValueError as exc:
        raise NamedError(str(exc)) from None


def phase_buckets(value: str | Iterable[float]) -> tuple[float, ...]:
    """``"none"`` or an empty sequence: no bounds (sums and counts only); else the bounds."""
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


def profile_steps(value: str | int) -> int:
    """Steps one profiler capture records: an integer 1..MAX_PROFILE_STEPS."""
    steps = int_at_least(1)(value)
    if steps > MAX_PROFILE_STEPS:
        raise ValueError(f"must be at most {MAX_PROFILE_STEPS}")
    return steps


def signal_number(value: str) -> int | None:
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


def megabytes(value: str) -> int:
    """A size in MB (MiB) -> bytes."""
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a size in MB > 0")
    return int(number * 1024 * 1024)
