"""HTTP/1.1 requests as the exporter reads them: strictly, and never with a body.

Anything two parsers could read two ways (a repeated Content-Length, obsolete line folding, a
body at all) is refused: ``BadRequest`` carries the status to answer before closing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Headers whose repetition makes a request mean two things to two parsers (smuggling).
_SINGLE = ("content-length", "transfer-encoding", "host", "authorization")


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    version: str
    headers: Mapping[str, str]  # names lower-cased
    client: str  # the peer's address, for per-client limits


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)


class BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def parse_head(head: bytes, client: str) -> Request:
    """A request from its line and headers (``head`` ends with the blank line).

    >>> parse_head(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nAccept: a\\r\\n\\r\\n", "::1").headers
    {'host': 'x', 'accept': 'a'}
    """
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1]:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(505, "only versions 1.0 and 1.1 are served")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):  # also refuses obsolete line folding
            raise BadRequest(400, "malformed header line")
        key, value = name.lower(), value.strip(" \t")
        if key in headers and key in _SINGLE:
            raise BadRequest(400, f"repeated {name} header")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if "transfer-encoding" in headers or headers.get("content-length", "0") != "0":
        raise BadRequest(413, "request bodies are not accepted")
    return Request(method, target, version, headers, client)
