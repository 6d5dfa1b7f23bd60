"""Log lines as Prometheus exporters write them: logfmt (the default) or JSON, one per record.

logfmt here is the real thing, as go-kit's logger writes it for Prometheus and node_exporter:
``ts=2026-11-23T05:38:43.370Z level=info logger=exporter msg="serving http://..."``, an RFC 3339
UTC timestamp, lower-case levels, and every value with a space, ``=`` or a quote quoted and
escaped, so logfmt parsers read each line back into the same fields.

>>> import logging
>>> record = logging.LogRecord("exporter", logging.WARNING, "", 0, 'say "hi" now', None, None)
>>> record.created = 0.0
>>> LogfmtFormatter().format(record)
'ts=1970-01-01T00:00:00.000Z level=warn logger=exporter msg="say \\\\"hi\\\\" now"'
"""

from __future__ import annotations

import json
import logging
import time

FORMATS = ("logfmt", "json")
_LEVELS = {"WARNING": "warn", "CRITICAL": "error"}


def _timestamp(created: float) -> str:
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def _fields(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, str]:
    fields = {"ts": _timestamp(record.created),
              "level": _LEVELS.get(record.levelname, record.levelname.lower()),
              "logger": record.name, "msg": record.getMessage()}
    if record.exc_info:
        fields["err"] = formatter.formatException(record.exc_info)
    return fields


def logfmt_value(value: str) -> str:
    """``value`` bare when it can be, else quoted with ``\\``, ``"`` and newlines escaped."""
    if value and not any(c in value for c in ' ="\\\n\t\r') and value.isprintable():
        return value
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """One logfmt line per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={logfmt_value(v)}" for k, v in _fields(self, record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the same fields as the logfmt line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(self, record), ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    """Log ``level`` and up to stderr in ``fmt`` (one of FORMATS)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    logging.basicConfig(level=level, handlers=[handler])
