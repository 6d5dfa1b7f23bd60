"""exporter.logformat alone: the timestamp to the millisecond, the level names, logfmt's
quoting read back by a strict parser (hypothesis), and what configure() installs."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import logfmtkv
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter import logformat
from exporter.logformat import JsonFormatter, LogfmtFormatter, logfmt_value


def record(message: str = "hello", level: int = logging.INFO, name: str = "exporter.gpu",
           created: float = 1_700_000_123.4567) -> logging.LogRecord:
    made = logging.LogRecord(name, level, "", 0, message, None, None)
    made.created = created
    return made


@pytest.mark.parametrize(("created", "stamp"), [
    (0.0, "1970-01-01T00:00:00.000Z"),
    (1_700_000_123.4567, "2023-11-14T22:15:23.456Z"),
    (86_399.999, "1970-01-01T23:59:59.999Z"),
    (3_600.05, "1970-01-01T01:00:00.050Z"),
    (59.007, "1970-01-01T00:00:59.007Z"),
])
def test_the_timestamp_is_utc_to_the_millisecond(created: float, stamp: str) -> None:
    assert logformat._timestamp(created) == stamp


@pytest.mark.parametrize(("level", "name"), [
    (logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.WARNING, "warn"),
    (logging.ERROR, "error"), (logging.CRITICAL, "error")])
def test_levels_are_named_as_go_kit_names_them(level: int, name: str) -> None:
    line = LogfmtFormatter().format(record(level=level))
    assert line == f"ts=2023-11-14T22:15:23.456Z level={name} logger=exporter.gpu msg=hello"
    assert json.loads(JsonFormatter().format(record(level=level)))["level"] == name


def test_a_json_line_has_the_logfmt_fields_in_order_and_keeps_non_ascii() -> None:
    line = JsonFormatter().format(record('GPU "0" lost: é ✓', logging.WARNING))
    assert line == ('{"ts": "2023-11-14T22:15:23.456Z", "level": "warn", '
                    '"logger": "exporter.gpu", "msg": "GPU \\"0\\" lost: é ✓"}')


def test_the_message_is_formatted_with_its_args() -> None:
    made = logging.LogRecord("exporter", logging.INFO, "", 0, "%s GPUs at %d%%", ("eight", 93),
                             None)
    made.created = 0.0
    assert LogfmtFormatter().format(made).endswith(' msg="eight GPUs at 93%"')


def test_an_exception_is_the_err_field_and_only_with_one() -> None:
    assert "err" not in json.loads(JsonFormatter().format(record()))
    try:
        raise ValueError("bad value")
    except ValueError:
        made = logging.LogRecord("x", logging.ERROR, "", 0, "failed", None, sys.exc_info())
    fields = json.loads(JsonFormatter().format(made))
    assert list(fields) == ["ts", "level", "logger", "msg", "err"]
    assert fields["err"].startswith("Traceback") and fields["err"].endswith(
        "ValueError: bad value")


@pytest.mark.parametrize(("value", "written"), [
    ("plain", "plain"), ("a.b/c:d-1", "a.b/c:d-1"),
    ("", '""'), ("two words", '"two words"'), ("k=v", '"k=v"'), ('say "hi"', '"say \\"hi\\""'),
    ("C:\\temp", '"C:\\\\temp"'), ("one\ntwo", '"one\\ntwo"'), ("tab\there", '"tab\\there"'),
    ("cr\rhere", '"cr\\rhere"'), ("bell\x07", '"bell\x07"'), ("é", "é")])
def test_a_value_is_bare_only_when_it_can_be(value: str, written: str) -> None:
    assert logfmt_value(value) == written


@given(st.text())
def test_every_value_reads_back_whole(value: str) -> None:
    written = logfmt_value(value)
    assert "\n" not in written and "\r" not in written
    if value.isprintable():  # logfmt parsers read printable text back; control bytes stay raw
        assert logfmtkv.parse(f"k={written}", strict=True)["k"] == value


@given(st.text(alphabet=st.characters(blacklist_characters=' ="\\\n\t\r',
                                      blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")),
               min_size=1))
def test_a_value_with_nothing_to_escape_is_written_bare(value: str) -> None:
    if value.isprintable():
        assert logfmt_value(value) == value


@pytest.mark.parametrize(("fmt", "kind"), [("logfmt", LogfmtFormatter),
                                           ("json", JsonFormatter),
                                           ("anything else", LogfmtFormatter)])
def test_configure_installs_one_stderr_handler_with_the_format(
        monkeypatch: pytest.MonkeyPatch, fmt: str, kind: type) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: seen.update(kwargs))
    logformat.configure("WARNING", fmt)
    [handler] = seen["handlers"]
    assert seen["level"] == "WARNING"
    assert type(handler) is logging.StreamHandler and type(handler.formatter) is kind
    assert logformat.FORMATS == ("logfmt", "json")
