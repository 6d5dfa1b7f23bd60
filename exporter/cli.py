"""``trainwatch-exporter``: parse flags and the config file, build the registry, serve.

Bad input (an unknown collector or key, a bad listen address, a missing or invalid config
file) exits with status 2 and one line naming the problem, never a traceback.

>>> main(["--no-collector.nope"])
2
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields
from types import FrameType
from typing import Any, NoReturn

from exporter import __version__, logformat
from exporter.collectors import COLLECTORS, build_registry
from exporter.config import ConfigError, Settings, key_of, load_file, merge, unknown_collector

PROG = "trainwatch-exporter"
log = logging.getLogger("exporter")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, allow_abbrev=False, argument_default=argparse.SUPPRESS,
                     description="GPU (NVML) and host (psutil) metrics for Prometheus, read at "
                                 "scrape time.")
    parser.add_argument("--config", metavar="FILE", help="YAML file with the same settings "
                        "(flags win); see the README")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    for f in fields(Settings):
        meta = f.metadata
        if not meta.get("flag"):
            continue
        key = key_of(f.name)
        flag = "--" + key.replace("_", "-")
        if meta["kind"] is bool:
            parser.add_argument(flag, dest=key, action=argparse.BooleanOptionalAction,
                                help=f"{meta['help']} (default: {f.default})")
        else:
            parser.add_argument(flag, dest=key, type=meta["kind"], metavar="|".join(meta["choices"]) or "VALUE",
                                choices=meta["choices"] or None,
                                help=f"{meta['help']} (default: {f.default})")
    for name, entry in COLLECTORS.items():
        parser.add_argument(f"--collector.{name}", dest=f"collector.{name}",
                            action=argparse.BooleanOptionalAction,
                            help=f"{entry.help} (default: {'on' if entry.default else 'off'})")
    return parser


def parse_settings(argv: Sequence[str]) -> Settings:
    """Settings from ``argv`` and the ``--config`` file it names; ``ConfigError`` if bad."""
    path, flags = parse_flags(argv)
    return merge(file=load_file(path) if path else {}, flags=flags)


def parse_flags(argv: Sequence[str]) -> tuple[str | None, dict[str, Any]]:
    """The ``--config`` path (or None) and the other flags of ``argv``, by key."""
    parser = build_parser()
    namespace, unknown = parser.parse_known_args(argv)
    for arg in unknown:
        name = arg.split("=", 1)[0].removeprefix("--no-").removeprefix("--")
        if name.startswith("collector."):
            raise unknown_collector(name.split(".", 1)[1])
        raise ConfigError(f"unknown argument {arg!r}; see {PROG} --help")
    flags: dict[str, Any] = vars(namespace)
    return flags.pop("config", None), flags


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, *, nvml: Any | None = None) -> int:
    """Run the exporter until SIGTERM/SIGINT; SIGHUP reloads the web config (users, TLS).
    ``nvml`` replaces ``pynvml`` (tests only)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path, _ = parse_flags(args)
        settings = parse_settings(args)
        level = settings.log_level.upper().replace("WARN", "WARNING")
        logformat.configure(level, settings.log_format)
        from exporter.web import make_server  # after logging: http.server is no small import
        from exporter.webreload import LiveWebConfig

        web = LiveWebConfig(settings, lambda: parse_settings(args), path)
        # Bound (and TLS loaded) before the collectors start: a config error is the one line.
        server = make_server(settings, lambda: build_registry(settings, nvml), web=web)
    except ConfigError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    web.reload_on(signal.SIGHUP)
    host, port = server.server_address[:2]
    scheme = "https" if settings.web_tls_cert_file else "http"
    log.info("%s %s serving %s://%s:%s/metrics (collectors: %s)", PROG, __version__, scheme,
             host, port, ", ".join(settings.enabled_collectors))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.server_close()
    return 0
