"""Settings: one dataclass that defines every flag and every YAML key, and their validation.

A setting ``section_name`` is the YAML key ``section: {name: ...}`` and the flag
``--section.name`` (underscores become dashes); collectors are ``collector: {NAME: bool}`` and
``--collector.NAME`` / ``--no-collector.NAME``. Flags win over the file, the file over defaults.

>>> settings = merge(file={"web.listen_address": "127.0.0.1:9000"},
...                  flags={"collector.gpu": False})
>>> settings.web_listen_address, settings.collectors["gpu"], settings.collectors["host"]
('127.0.0.1:9000', False, True)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from exporter.collectors import COLLECTORS
from exporter.configfile import UnsafeYAML, cut, parse_yaml, read_text, shown
from exporter.host import DISK_DEVICE_EXCLUDE
from exporter.webauth import parse_hash

# Outside 9100-9999, which the Prometheus wiki's default-port list has fully handed out.
DEFAULT_LISTEN_ADDRESS = ":10910"
LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_FORMATS = ("logfmt", "json")
LISTEN_PATTERN = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})$")


class ConfigError(Exception):
    """Bad input from the command line or the config file; the message names the culprit."""


def _setting(default: Any, kind: type, help_text: str, flag: bool = True,
             choices: tuple[str, ...] = (), validate: Callable[[Any], object] | None = None) -> Any:
    # ``validate`` raises ConfigError for a value of the right type that is still wrong; it runs
    # per key in check(), so an error from a config file names the file too.
    meta = {"kind": kind, "help": help_text, "flag": flag, "choices": choices,
            "validate": validate}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


def _finite_non_negative(key: str) -> Callable[[float], None]:
    def validate(value: float) -> None:
        if not 0 <= value < math.inf:  # also rejects NaN
            raise ConfigError(f"{key} must be a finite number >= 0, not {shown(value)}")
    return validate


def _regexp(key: str) -> Callable[[str], None]:
    def validate(value: str) -> None:
        try:
            re.compile(value)
        except re.error as err:
            raise ConfigError(f"{key}: {shown(value)} is not a regular expression: {err}") from None
    return validate


def _peak_flops(value: str) -> None:
    from exporter.peak_flops import parse_overrides

    try:
        parse_overrides(value)
    except ValueError as err:
        raise ConfigError(f"gpu.peak_flops: {err}") from None


def _default_collectors() -> dict[str, bool]:
    return {name: entry.default for name, entry in COLLECTORS.items()}


@dataclass(frozen=True)
class Settings:
    """Everything the exporter can be told; see the README's configuration section."""

    web_listen_address: str = _setting(DEFAULT_LISTEN_ADDRESS, str, "HOST:PORT to serve on "
                                       "(empty HOST: all interfaces)",
                                       validate=lambda v: parse_listen_address(v))
    web_tls_cert_file: str | None = _setting(None, str, "serve HTTPS with this PEM certificate")
    web_tls_key_file: str | None = _setting(None, str, "PEM private key for the certificate "
                                            "(unencrypted)")
    web_basic_auth_users: Mapping[str, str] = _setting(
        {}, dict, "user: password hash (config file only)", flag=False)
    gpu_pcie_throughput: bool = _setting(True, bool, "read PCIe throughput (from GPM where the "
                                         "GPU has it; else NVML samples 20 ms, all GPUs at once)")
    gpu_nvml_retry_seconds: float = _setting(60.0, float, "while NVML is missing, try to load "
                                             "it again at most this often",
                                             validate=_finite_non_negative(
                                                 "gpu.nvml_retry_seconds"))
    gpu_peak_flops: str = _setting("", str, "dense peak FLOP/s per precision for every GPU of "
                                   "the node, over the built-in datasheet table: "
                                   "DTYPE=FLOPS[,DTYPE=FLOPS] (DTYPE: fp8, bf16, fp16, tf32, "
                                   "fp32), e.g. bf16=989.4e12",
                                   validate=_peak_flops)
    log_level: str = _setting("info", str, "log verbosity", choices=LOG_LEVELS)
    log_format: str = _setting("logfmt", str, "log line format on stderr", choices=LOG_FORMATS)
    host_disk_device_exclude: str = _setting(
        DISK_DEVICE_EXCLUDE, str, "regexp of block devices left out of the disk counters "
        "(partitions, RAM, zram and loop devices, floppies: node_exporter 1.6+'s default)",
        validate=_regexp("host.disk_device_exclude"))
    path_procfs: str = _setting(
        "/proc", str, "procfs whose <pid>/cgroup the gpu_process collector reads to name each "
        "GPU process's pod or Slurm job: one that shows the host's processes (the host's PID "
        "namespace, or the host's /proc mounted here, e.g. /host/proc)")
    collectors: Mapping[str, bool] = field(default_factory=_default_collectors)

    @property
    def enabled_collectors(self) -> tuple[str, ...]:
        """Names of the collectors to run, in the collector table's order."""
        return tuple(name for name, on in self.collectors.items() if on)

    def __post_init__(self) -> None:
        if (self.web_tls_cert_file is None) != (self.web_tls_key_file is None):
            raise ConfigError("web.tls_cert_file and web.tls_key_file must be given together")


def key_of(name: str) -> str:
    """Settings field -> dotted key: ``web_listen_address`` -> ``web.listen_address``."""
    return name.replace("_", ".", 1)


OPTIONS = {key_of(f.name): f for f in fields(Settings) if f.name != "collectors"}
SECTIONS = sorted({key.split(".")[0] for key in OPTIONS} | {"collector"})


def parse_listen_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``[::1]:PORT`` for IPv6.

    >>> parse_listen_address(":10910")
    ('', 10910)
    """
    match = re.match(r"^(?P<rest>.*):(?P<port>\d+)$", address) if isinstance(address, str) else None
    if match and int(match["port"]) > 65535 and LISTEN_PATTERN.match(f"{match['rest']}:0"):
        raise ConfigError(f"invalid listen address {shown(address)}: port {match['port']} is "
                          "out of range 0-65535")
    match = LISTEN_PATTERN.match(address)
    if not match:
        raise ConfigError(f"invalid listen address {shown(address)}: expected HOST:PORT, "
                          "e.g. ':10910' or '127.0.0.1:10910'")
    return match["host"].strip("[]"), int(match["port"])


def unknown_collector(name: str) -> ConfigError:
    return ConfigError(f"unknown collector {shown(name)} (known: {', '.join(sorted(COLLECTORS))})")


def check(key: str, value: Any) -> Any:
    """``value`` if it suits setting ``key``, else ``ConfigError`` naming the key."""
    if key.startswith("collector."):
        if key.split(".", 1)[1] not in COLLECTORS:
            raise unknown_collector(key.split(".", 1)[1])
        kind: type = bool
    elif key in OPTIONS:
        kind = OPTIONS[key].metadata["kind"]
    else:
        raise ConfigError(f"unknown key {shown(key)} (known: {', '.join(sorted(OPTIONS))}, "
                          "collector.NAME)")
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise ConfigError(f"{key} must be a {kind.__name__}, not {shown(value)}")
    choices = OPTIONS[key].metadata["choices"] if key in OPTIONS else ()
    if choices and value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(choices)}, not {shown(value)}")
    validate = OPTIONS[key].metadata["validate"] if key in OPTIONS else None
    if validate is not None:
        validate(value)
    if key == "web.basic_auth_users":
        for user, encoded in value.items():
            try:
                parse_hash(str(encoded))
            except ValueError as err:
                raise ConfigError(f"web.basic_auth_users.{cut(str(user))}: {err}") from None
    return value


def load_file(path: str) -> dict[str, Any]:
    """The settings of a YAML file as ``{dotted key: value}``, checked."""
    import yaml  # only with --config: keeps the exporter's startup and memory light

    try:
        doc = parse_yaml(read_text(path))
    except OSError as err:
        raise ConfigError(f"config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {err.start})") from None
    except UnsafeYAML as err:
        raise ConfigError(f"config file {path}: refused: {err}") from None
    except ValueError as err:  # from read_text: not a regular file, too big
        raise ConfigError(f"config file {path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path}: invalid YAML{_where(err)}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path}: expected a mapping with sections "
                          f"{', '.join(SECTIONS)}")
    flat: dict[str, Any] = {}
    try:
        for section, body in doc.items():
            if section not in SECTIONS:
                raise ConfigError(f"unknown key {shown(section)} "
                                  f"(sections: {', '.join(SECTIONS)})")
            if not isinstance(body, dict):
                raise ConfigError(f"{section} must be a mapping, not {shown(body)}")
            for name, value in body.items():
                flat[f"{section}.{name}"] = check(f"{section}.{name}", value)
    except ConfigError as err:
        raise ConfigError(f"config file {path}: {err}") from None
    return flat


def _where(err: Exception) -> str:
    mark = getattr(err, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{at}: {getattr(err, 'problem', None) or err}".replace("\n", " ")


def merge(file: Mapping[str, Any], flags: Mapping[str, Any]) -> Settings:
    """Settings from defaults, then the file, then the flags."""
    values = {**file, **flags}
    collectors = _default_collectors()
    options: dict[str, Any] = {}
    for key, value in values.items():
        check(key, value)
        if key.startswith("collector."):
            collectors[key.split(".", 1)[1]] = value
        else:
            options[OPTIONS[key].name] = value
    return replace(Settings(), collectors=collectors, **options)
