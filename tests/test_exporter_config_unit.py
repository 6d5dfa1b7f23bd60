"""exporter.config without the CLI around it: each setting's check both ways, the listen
address parser, the config file's sections and its error messages word for word."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from exporter import config
from exporter.cli import build_parser
from exporter.config import (
    OPTIONS,
    SECTIONS,
    ConfigError,
    Settings,
    check,
    key_of,
    load_file,
    merge,
    parse_listen_address,
)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "exporter.yml"
    path.write_text(text)
    return str(path)


def test_the_options_are_every_setting_but_the_collectors() -> None:
    assert sorted(OPTIONS) == [
        "gpu.nvml_retry_seconds", "gpu.pcie_throughput", "gpu.peak_flops",
        "host.disk_device_exclude", "log.format", "log.level", "path.procfs",
        "web.basic_auth_users", "web.listen_address", "web.tls_cert_file", "web.tls_key_file"]
    assert "collectors" not in OPTIONS
    assert SECTIONS == ["collector", "gpu", "host", "log", "path", "web"]
    assert key_of("web_basic_auth_users") == "web.basic_auth_users"


def test_the_defaults() -> None:
    settings = Settings()
    assert settings.gpu_nvml_retry_seconds == 60.0
    assert settings.web_listen_address == ":10910"
    assert (settings.web_tls_cert_file, settings.web_tls_key_file) == (None, None)
    assert settings.web_basic_auth_users == {}
    assert (settings.log_level, settings.log_format) == ("info", "logfmt")
    assert settings.gpu_peak_flops == "" and settings.path_procfs == "/proc"
    assert settings.enabled_collectors == ("gpu", "host")


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().log_level = "debug"  # type: ignore[misc]


def test_users_are_set_in_the_file_only_never_by_a_flag() -> None:
    assert OPTIONS["web.basic_auth_users"].metadata["flag"] is False
    flags = {option for action in build_parser()._actions for option in action.option_strings}
    assert "--web.basic-auth-users" not in flags
    assert "--web.listen-address" in flags and "--gpu.nvml-retry-seconds" in flags


@pytest.mark.parametrize("cert", ["c.pem", None])
def test_a_certificate_and_its_key_come_together(cert: str | None) -> None:
    key = None if cert else "k.pem"
    with pytest.raises(ConfigError, match="web.tls_cert_file and web.tls_key_file must be "
                                          "given together"):
        Settings(web_tls_cert_file=cert, web_tls_key_file=key)
    both = Settings(web_tls_cert_file="c.pem", web_tls_key_file="k.pem")
    assert (both.web_tls_cert_file, both.web_tls_key_file) == ("c.pem", "k.pem")


# float("1e999") is an infinity of its own, not the math.inf object.
@pytest.mark.parametrize("value", [math.inf, float("1e999"), -math.inf, math.nan, -0.25, -1e-300])
def test_a_retry_interval_must_be_finite_and_not_negative(value: float) -> None:
    with pytest.raises(ConfigError, match=r"^gpu.nvml_retry_seconds must be a finite number "
                                          r">= 0, not "):
        check("gpu.nvml_retry_seconds", value)


@pytest.mark.parametrize("value", [0, 0.0, 7, 2.5, 1e9])
def test_a_finite_retry_interval_is_a_float(value: float) -> None:
    checked = check("gpu.nvml_retry_seconds", value)
    assert checked == value and type(checked) is float


def test_a_bool_is_no_number_and_a_number_no_bool() -> None:
    with pytest.raises(ConfigError, match=r"^gpu.nvml_retry_seconds must be a float, not True$"):
        check("gpu.nvml_retry_seconds", True)
    with pytest.raises(ConfigError, match=r"^gpu.pcie_throughput must be a bool, not 1$"):
        check("gpu.pcie_throughput", 1)
    with pytest.raises(ConfigError, match=r"^collector.host must be a bool, not 'yes'$"):
        check("collector.host", "yes")
    with pytest.raises(ConfigError, match=r"^log.level must be a str, not 5$"):
        check("log.level", 5)
    assert check("gpu.pcie_throughput", False) is False
    assert check("collector.gpu_process", True) is True


def test_a_collector_key_names_exactly_one_collector() -> None:
    with pytest.raises(ConfigError, match=r"^unknown collector 'gpu.x' \(known: gpu, "
                                          r"gpu_process, host\)$"):
        check("collector.gpu.x", True)
    with pytest.raises(ConfigError, match=r"^unknown collector 'nvidia'"):
        check("collector.nvidia", True)


def test_an_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        check("web.listen_addres", ":1")
    assert str(caught.value) == ("unknown key 'web.listen_addres' (known: "
                                 + ", ".join(sorted(OPTIONS)) + ", collector.NAME)")


def test_choices_are_checked_and_named() -> None:
    with pytest.raises(ConfigError, match=r"^log.format must be one of logfmt, json, not 'xml'$"):
        check("log.format", "xml")
    with pytest.raises(ConfigError, match=r"^log.level must be one of debug, info, warn, "
                                          r"error, not 'loud'$"):
        check("log.level", "loud")
    assert check("log.format", "json") == "json" and check("log.level", "warn") == "warn"


def test_validators_run_for_their_key_only() -> None:
    with pytest.raises(ConfigError, match=r"^host.disk_device_exclude: '\(zram' is not a "
                                          r"regular expression: "):
        check("host.disk_device_exclude", "(zram")
    assert check("host.disk_device_exclude", "^(ram|loop)\\d+$") == "^(ram|loop)\\d+$"
    assert check("path.procfs", "(not a regexp but a path") == "(not a regexp but a path"
    with pytest.raises(ConfigError, match=r"^gpu.peak_flops: "):
        check("gpu.peak_flops", "bf16=lots")
    assert check("gpu.peak_flops", "bf16=989.4e12") == "bf16=989.4e12"
    with pytest.raises(ConfigError, match="invalid listen address"):
        check("web.listen_address", "nowhere")


def test_a_bad_user_hash_names_the_user() -> None:
    with pytest.raises(ConfigError, match=r"^web.basic_auth_users.alice: "):
        check("web.basic_auth_users", {"alice": "plaintext"})
    with pytest.raises(ConfigError, match=r"^web.basic_auth_users.uuuuu"):
        check("web.basic_auth_users", {"u" * 100: "plaintext"})


@pytest.mark.parametrize(("address", "parsed"), [
    (":10910", ("", 10910)), ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:65535", ("::1", 65535)), ("host.example:8080", ("host.example", 8080)),
    ("[fe80::1]:9", ("fe80::1", 9))])
def test_a_listen_address_parses_to_host_and_port(address: str, parsed: tuple[str, int]) -> None:
    assert parse_listen_address(address) == parsed


@pytest.mark.parametrize(("address", "message"), [
    ("127.0.0.1:65536", ("invalid listen address '127.0.0.1:65536': port 65536 is out of "
                        "range 0-65535")),
    ("[::1]:70000", "invalid listen address '[::1]:70000': port 70000 is out of range 0-65535"),
    ("127.0.0.1", ("invalid listen address '127.0.0.1': expected HOST:PORT, e.g. ':10910' or "
                  "'127.0.0.1:10910'")),
    ("a:b:123456", "invalid listen address 'a:b:123456': expected HOST:PORT"),
    ("host:", "invalid listen address 'host:': expected HOST:PORT"),
    ("host:123456", "invalid listen address 'host:123456': port 123456 is out of range")])
def test_a_bad_listen_address_says_why(address: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_listen_address(address)
    assert str(caught.value).startswith(message)


def test_a_listen_address_that_is_no_string_is_refused_not_crashed_on() -> None:
    with pytest.raises((ConfigError, TypeError)):
        parse_listen_address(10910)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be a str"):
        check("web.listen_address", 10910)


def test_an_empty_file_is_no_settings(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "")) == {}
    assert load_file(write(tmp_path, "# only a comment\n")) == {}


def test_a_file_flattens_to_dotted_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "gpu:\n  nvml_retry_seconds: 3\n  pcie_throughput: false\n"
                           "collector:\n  gpu_process: true\nlog: {level: debug}\n")
    assert load_file(path) == {"gpu.nvml_retry_seconds": 3.0, "gpu.pcie_throughput": False,
                               "collector.gpu_process": True, "log.level": "debug"}


@pytest.mark.parametrize(("text", "message"), [
    ("- web\n", "expected a mapping with sections collector, gpu, host, log, path, web"),
    ("webb: {x: 1}\n", "unknown key 'webb' (sections: collector, gpu, host, log, path, web)"),
    ("web: 5\n", "web must be a mapping, not 5"),
    ("log:\n  level: loud\n", "log.level must be one of debug, info, warn, error, not 'loud'"),
    ("log: [unclosed\n", "invalid YAML at line 2, column 1: did not find expected ',' or ']'"),
    ("a: b\n  c: d\n", ("invalid YAML at line 2, column 4: mapping values are not allowed in "
                       "this context")),
    ('web:\n  x: "\\q"\n', "invalid YAML at line 2, column 7: found unknown escape character"),
])
def test_a_bad_file_names_the_file_and_the_problem(tmp_path: Path, text: str,
                                                    message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert str(caught.value) == f"config file {path}: {message}"


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes(b"log:\n  level: d\xe9bug\n")
    with pytest.raises(ConfigError) as caught:
        load_file(str(path))
    assert str(caught.value) == f"config file {path}: not UTF-8 text (byte 15)"


def test_where_without_a_mark_is_the_problem_alone() -> None:
    class Bare(Exception):
        problem = None

    assert config._where(Bare("plain words")) == ": plain words"

    class Marked(Exception):
        problem = "two\nlines"
        problem_mark = type("Mark", (), {"line": 4, "column": 0})()

    assert config._where(Marked()) == " at line 5, column 1: two lines"


def test_merge_puts_flags_over_the_file_and_collectors_apart() -> None:
    settings = merge(file={"log.level": "debug", "collector.gpu_process": True,
                           "gpu.nvml_retry_seconds": 9},
                     flags={"log.level": "error", "collector.host": False})
    assert settings.log_level == "error"
    assert settings.gpu_nvml_retry_seconds == 9
    assert settings.collectors == {"gpu": True, "host": False, "gpu_process": True}
    assert settings.enabled_collectors == ("gpu", "gpu_process")
    with pytest.raises(ConfigError, match="unknown key"):
        merge(file={}, flags={"nope.x": 1})
