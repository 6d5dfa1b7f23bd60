"""The exporter's log lines, read back by a logfmt parser library (PyPI `logfmtkv`, strict: it
rejects what go-logfmt rejects) and by json: every field intact, messages with spaces, quotes
and newlines whole, timestamps RFC 3339."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from pathlib import Path

import logfmtkv
import pytest

from benchmarks.stack import http_get, start_trainwatch_exporter
from exporter import __version__
from exporter.logformat import JsonFormatter, LogfmtFormatter

FIELDS = ["ts", "level", "logger", "msg"]


def parse(line: str) -> dict[str, str | bool]:
    return logfmtkv.parse(line, strict=True, duplicates="error")


def rfc3339(ts: str) -> datetime:
    assert ts.endswith("Z"), ts
    return datetime.fromisoformat(ts)


def lines_of(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.strip()]


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_the_real_exporters_lines_parse_back(tmp_path: Path, fmt: str) -> None:
    with start_trainwatch_exporter(tmp_path, "--no-collector.gpu", f"--log.format={fmt}") as svc:
        assert http_get(svc.url + "/metrics")[0] == 200
    lines = lines_of(svc.log())
    records = ([json.loads(line) for line in lines] if fmt == "json"
               else [parse(line) for line in lines])
    assert records and all(list(r)[:4] == FIELDS for r in records), records
    serving = [r for r in records if " serving " in r["msg"]]
    assert [r["msg"] for r in serving] == [
        (f"trainwatch-exporter {__version__} serving http://127.0.0.1:{svc.port}/metrics "
        "(collectors: host)")]
    assert serving[0]["level"] == "info" and serving[0]["logger"] == "exporter"
    assert abs((datetime.now().astimezone() - rfc3339(serving[0]["ts"])).total_seconds()) < 120


def test_quotes_backslashes_newlines_and_exceptions_survive_logfmt() -> None:
    nasty = 'path "C:\\temp" = bad\nsecond line'
    try:
        raise OSError("disk gone")
    except OSError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("exporter.collector", logging.ERROR, "", 0, nasty, None, exc_info)
    line = LogfmtFormatter().format(record)
    assert "\n" not in line
    parsed = parse(line)
    assert parsed["msg"] == nasty and parsed["level"] == "error"
    assert str(parsed["err"]).startswith("Traceback") and "OSError: disk gone" in str(parsed["err"])
    assert json.loads(JsonFormatter().format(record))["msg"] == nasty
    warn = logging.LogRecord("x", logging.WARNING, "", 0, "plain", None, None)
    assert parse(LogfmtFormatter().format(warn))["level"] == "warn"

