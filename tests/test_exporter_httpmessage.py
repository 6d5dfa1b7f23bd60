"""The exporter's HTTP request parser (exporter.httpmessage) on its own: what a request reads as,
and everything two parsers could read two ways refused with its status (issue 36: the
httpmessage mutation target; property-based over header names and values)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.httpmessage import BadRequest, Request, Response, parse_head


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def refused(data: bytes) -> tuple[int, str]:
    with pytest.raises(BadRequest) as err:
        parse_head(data, "10.0.0.1")
    return err.value.status, str(err.value)


def test_a_request_reads_as_its_line_headers_and_client() -> None:
    request = parse_head(head("GET /metrics?x=1 HTTP/1.0", "Host: h:9400",
                              "Accept:  text/plain\t", "X-Empty:", "Content-Length: 0"),
                         "10.0.0.1")
    assert request == Request("GET", "/metrics?x=1", "HTTP/1.0",
                              {"host": "h:9400", "accept": "text/plain", "x-empty": "",
                               "content-length": "0"}, "10.0.0.1")
    assert parse_head(head("HEAD / HTTP/1.1"), "::1").headers == {}


def test_a_repeated_header_is_joined_unless_it_must_be_single() -> None:
    request = parse_head(head("GET / HTTP/1.1", "Accept: a", "ACCEPT: b", "accept: c"), "c")
    assert request.headers == {"accept": "a, b, c"}
    for name in ("Content-Length", "Transfer-Encoding", "Host", "Authorization"):
        status, reason = refused(head("GET / HTTP/1.1", f"{name}: 0", f"{name.upper()}: 0"))
        assert (status, reason) == (400, f"repeated {name.upper()} header")


@pytest.mark.parametrize("line", [
    "GET /", "GET / HTTP/1.1 x", "GET  / HTTP/1.1", "G(T / HTTP/1.1", " / HTTP/1.1",
    "GET  HTTP/1.1", ""])
def test_a_malformed_request_line_is_400(line: str) -> None:
    assert refused(head(line)) == (400, "malformed request line")


@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/0.9", "http/1.1", "HTTP/1.10"])
def test_versions_other_than_1_0_and_1_1_are_505(version: str) -> None:
    assert refused(head(f"GET / {version}")) == (505, "only versions 1.0 and 1.1 are served")


@pytest.mark.parametrize("line", ["NoColon", ": value", "Bad Name: v", " folded: v",
                                  "\tfolded", "Na(me: v"])
def test_a_malformed_header_line_or_a_folded_one_is_400(line: str) -> None:
    assert refused(head("GET / HTTP/1.1", "Host: h", line)) == (400, "malformed header line")


@pytest.mark.parametrize("headers", [["Content-Length: 5"], ["Transfer-Encoding: chunked"],
                                     ["Transfer-Encoding: identity"], ["Content-Length: 00"],
                                     ["Content-Length:  1 "], ["Content-Length: +1"],
                                     ["Content-Length: -1"], ["Content-Length:"]])
def test_a_body_is_refused_413(headers: list[str]) -> None:
    assert refused(head("POST / HTTP/1.1", *headers)) == (413, "request bodies are not accepted")


tokens = st.text("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                 min_size=1, max_size=20)
values = st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF), max_size=30)


@given(st.dictionaries(tokens, values, max_size=6))
def test_any_token_named_header_reads_back_lower_cased_with_its_value(
        given_: dict[str, str]) -> None:
    names = {name.lower() for name in given_}
    if names & {"content-length", "transfer-encoding"} or len(names) < len(given_):
        return  # bodies and repeats: their own tests
    request = parse_head(head("GET / HTTP/1.1", *(f"{k}: {v}" for k, v in given_.items())), "c")
    assert request.headers == {k.lower(): v for k, v in given_.items()}


def test_responses_and_requests_are_frozen_and_a_response_says_plain_text() -> None:
    response = Response(200, b"ok")
    assert (response.content_type, response.headers) == ("text/plain; charset=utf-8", {})
    assert Response(200, b"").headers is not response.headers  # one dict each
    for value in (response, parse_head(head("GET / HTTP/1.1"), "c")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.status = 1  # type: ignore[misc, union-attr]
