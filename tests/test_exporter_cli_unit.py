"""exporter/cli.py in-process: the flags' help (choices as the metavar, each collector's default
said on or off), no abbreviations, unknown flags named as the user typed them, and main's run
with the server stood in for: the one 'serving' line (scheme, host and port of an IPv6 4-tuple
address), SIGTERM's handler, the stop on an interrupt with the server closed, exit 0."""

from __future__ import annotations

import logging
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from exporter import cli
from exporter.config import ConfigError


def help_text() -> str:
    return " ".join(cli.build_parser().format_help().split())


def test_help_shows_choices_as_the_metavar_and_value_elsewhere_and_collector_defaults() -> None:
    text = help_text()
    assert "--log.level debug|info|warn|error" in text and "--log.format logfmt|json" in text
    assert "--web.listen-address VALUE" in text
    assert "NVIDIA GPUs through NVML (default: on)" in text
    assert "Slurm job (default: off)" in text


@pytest.mark.parametrize("arg", ["--log.lev=debug", "--web.listen=127.0.0.1:1", "--collector.gp"])
def test_an_abbreviated_flag_is_refused(arg: str) -> None:
    with pytest.raises(ConfigError, match="unknown"):
        cli.parse_flags([arg])


def test_an_unknown_collector_is_named_without_its_value_or_prefix() -> None:
    with pytest.raises(ConfigError, match=r"unknown collector 'nope' \(known: ") as err:
        cli.parse_flags(["--collector.nope=1"])
    assert "nope=1" not in str(err.value)
    with pytest.raises(ConfigError, match=r"unknown collector 'a\.b'"):
        cli.parse_flags(["--no-collector.a.b"])
    with pytest.raises(ConfigError, match=r"unknown argument '--bogus=x=y'; see "):
        cli.parse_flags(["--bogus=x=y"])


class Server:
    """make_server's stand-in: an IPv6 address, serve_forever interrupted as SIGTERM does."""

    server_address = ("::1", 9123, 0, 0)

    def __init__(self) -> None:
        self.closed = False

    def serve_forever(self) -> None:
        raise KeyboardInterrupt

    def server_close(self) -> None:
        self.closed = True


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> tuple[Server, list[tuple[Any, ...]], dict[int, Any]]:
    import exporter.web
    server = Server()
    infos: list[tuple[Any, ...]] = []
    handlers: dict[int, Any] = {}
    monkeypatch.setattr(exporter.web, "make_server", lambda settings, registry, web: server)
    monkeypatch.setattr(cli.logformat, "configure", lambda level, fmt: None)
    monkeypatch.setattr(cli.log, "info", lambda *args: infos.append(args))
    monkeypatch.setattr(cli.signal, "signal", lambda sig, handler: handlers.__setitem__(
        sig, handler))
    return server, infos, handlers


def test_main_serves_says_where_stops_on_an_interrupt_closes_and_exits_0(
        served: tuple[Server, list[tuple[Any, ...]], dict[int, Any]]) -> None:
    server, infos, handlers = served
    assert cli.main(["--no-collector.gpu"]) == 0
    assert server.closed
    [(fmt, *values), stopping] = infos
    assert (fmt % tuple(values)).startswith(f"{cli.PROG} ") and \
        " serving http://::1:9123/metrics (collectors: " in fmt % tuple(values)
    assert stopping == ("stopping",)
    with pytest.raises(KeyboardInterrupt):
        handlers[signal.SIGTERM](signal.SIGTERM, None)
    assert signal.SIGHUP in handlers


def test_main_says_https_when_tls_is_configured(
        served: tuple[Server, list[tuple[Any, ...]], dict[int, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from exporter import webreload
    monkeypatch.setattr(webreload, "LiveWebConfig", lambda *args: type(
        "Web", (), {"reload_on": lambda self, sig: None})())
    _, infos, _ = served
    config = tmp_path / "web.yml"
    config.write_text(f"web:\n  tls_cert_file: {tmp_path / 'c.pem'}\n"
                      f"  tls_key_file: {tmp_path / 'k.pem'}\n")
    assert cli.main(["--config", str(config), "--no-collector.gpu"]) == 0
    fmt, *values = infos[0]
    assert " serving https://::1:9123/metrics " in fmt % tuple(values)


def test_the_readmes_config_row_is_the_flag_as_help_shows_it() -> None:
    """README's flag table documents ``--config FILE``; the help shows the same placeholder."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    [row] = re.findall(r"^\| `(--config [A-Z]+)` \|", readme, re.MULTILINE)
    assert f"{row} YAML file" in help_text()


@pytest.mark.parametrize(("choice", "numeric"), [
    ("debug", logging.DEBUG), ("info", logging.INFO), ("warn", logging.WARNING),
    ("error", logging.ERROR)])
def test_each_log_level_reaches_logging_as_a_level_it_knows(
        served: tuple[Server, list[tuple[Any, ...]], dict[int, Any]],
        monkeypatch: pytest.MonkeyPatch, choice: str, numeric: int) -> None:
    configured: list[tuple[str, str]] = []
    monkeypatch.setattr(cli.logformat, "configure",
                        lambda level, fmt: configured.append((level, fmt)))
    assert cli.main(["--no-collector.gpu", f"--log.level={choice}", "--log.format=json"]) == 0
    [(level, fmt)] = configured
    assert logging.getLevelNamesMapping()[level] == numeric and fmt == "json"


def test_the_serving_line_comes_from_the_logger_the_readme_names_above_the_others(
        served: tuple[Server, list[tuple[Any, ...]], dict[int, Any]],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """README's example line says ``logger=exporter``; the web server's logger is its child, so
    one name filters all of the exporter's records."""
    import exporter.web
    monkeypatch.undo()  # the real log.info, the fixture's other stand-ins again below
    monkeypatch.setattr(exporter.web, "make_server", lambda settings, registry, web: served[0])
    monkeypatch.setattr(cli.logformat, "configure", lambda level, fmt: None)
    monkeypatch.setattr(cli.signal, "signal", lambda sig, handler: None)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    [named] = set(re.findall(rf'logger=(\S+) msg="{cli.PROG} ', readme))
    caplog.set_level(logging.INFO)
    assert cli.main(["--no-collector.gpu"]) == 0
    [serving] = [r for r in caplog.records if " serving " in r.getMessage()]
    assert serving.name == named
    assert exporter.web.log.name.startswith(named + ".")
