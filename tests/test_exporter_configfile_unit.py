"""exporter.configfile alone: the limits at their exact edges (bytes, depth, values), where each
refusal says it is, and the bounded quoting of refused values."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from exporter import configfile
from exporter.configfile import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    UnsafeYAML,
    cut,
    parse_yaml,
    read_text,
    shown,
)


def test_the_limits() -> None:
    assert (MAX_BYTES, MAX_DEPTH, MAX_NODES) == (256 * 1024, 16, 10_000)
    assert configfile.TOO_DEEP == "nested deeper than 16 levels"


@given(st.text(max_size=200), st.integers(min_value=3, max_value=100))
def test_a_cut_text_is_at_most_the_limit_and_starts_as_the_text(text: str, limit: int) -> None:
    shortened = cut(text, limit)
    if len(text) <= limit:
        assert shortened == text
    else:
        assert len(shortened) == limit and shortened == text[:limit - 3] + "..."


def test_cut_at_the_edge() -> None:
    assert cut("x" * 60) == "x" * 60
    assert cut("x" * 61) == "x" * 57 + "..."
    assert cut("abcdef", 5) == "ab..."
    assert cut("abcde", 5) == "abcde"


def test_shown_bounds_strings_lists_and_nesting() -> None:
    assert shown("x" * 36) == "'" + "x" * 36 + "'"
    assert shown("y" * 1000) == "'" + "y" * 17 + "..." + "y" * 18 + "'"
    assert shown([1, 2, 3, 4, 5]) == "[1, 2, 3, 4, ...]"
    assert shown({"a": {"b": {"c": 1}}}) == "{'a': {'b': {...}}}"
    assert shown(10 ** 100) == "1" + "0" * 17 + "..." + "0" * 19
    assert shown(5) == "5" and shown(None) == "None"


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("web:\n  listen_address: ':1'\n")
    assert read_text(str(path)) == "web:\n  listen_address: ':1'\n"


def test_a_file_of_exactly_the_limit_is_read_one_byte_more_is_not(tmp_path: Path) -> None:
    path = tmp_path / "edge.yml"
    path.write_bytes(b"#" * MAX_BYTES)
    assert len(read_text(str(path))) == MAX_BYTES
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(ValueError, match=rf"^{MAX_BYTES + 1} bytes, over the limit of "
                                         rf"{MAX_BYTES}$"):
        read_text(str(path))


def test_a_file_that_grew_after_its_size_was_read_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "growing.yml"
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    real = os.fstat

    def smaller(fd: int) -> os.stat_result:
        info = real(fd)
        return os.stat_result((*info[:6], 10, *info[7:]))  # st_size as it was a moment ago

    monkeypatch.setattr(configfile.os, "fstat", smaller)
    with pytest.raises(ValueError, match=rf"^over the limit of {MAX_BYTES} bytes$"):
        read_text(str(path))


def test_the_file_is_open_read_only_without_blocking_and_closed_on_exec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO's open does not wait for a writer; the descriptor is not inherited by a process
    another thread starts meanwhile (os.open's own default since PEP 446, asked for anyway)."""
    path = tmp_path / "c.yml"
    path.write_text("a: 1\n")
    real, seen = os.fstat, []

    def flags(fd: int) -> os.stat_result:
        seen.append((fcntl.fcntl(fd, fcntl.F_GETFL), fcntl.fcntl(fd, fcntl.F_GETFD)))
        return real(fd)

    monkeypatch.setattr(configfile.os, "fstat", flags)
    assert read_text(str(path)) == "a: 1\n"
    [(status, descriptor)] = seen
    assert status & os.O_ACCMODE == os.O_RDONLY and status & os.O_NONBLOCK
    assert descriptor & fcntl.FD_CLOEXEC


def test_not_a_regular_file_and_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^not a regular file$"):
        read_text(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        read_text(str(tmp_path / "absent.yml"))


def test_reading_leaves_no_descriptor_open(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("a: 1\n")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        read_text(str(path))
        with pytest.raises(ValueError):
            read_text(str(tmp_path))
    assert len(os.listdir("/proc/self/fd")) == before


def nested(levels: int) -> str:
    """A mapping (one level) holding ``levels - 1`` nested lists."""
    return "a: " + "[" * (levels - 1) + "]" * (levels - 1) + "\n"


def test_nesting_up_to_the_limit_is_read_one_more_is_refused_where_it_is() -> None:
    assert parse_yaml(nested(MAX_DEPTH)) == {"a": eval("[" * 15 + "]" * 15)}
    with pytest.raises(UnsafeYAML) as caught:
        parse_yaml(nested(MAX_DEPTH + 1))
    assert str(caught.value) == "line 1, column 19: nested deeper than 16 levels"


def test_closed_collections_give_their_depth_back() -> None:
    """Depth is nesting, not the count of collections: many siblings at one level are fine."""
    siblings = "a:\n" + "".join(f"  k{i}: [[1], [2], {{x: [3]}}]\n" for i in range(40))
    assert len(parse_yaml(siblings)["a"]) == 40


def test_nesting_the_scanner_refuses_is_refused_in_the_same_words() -> None:
    with pytest.raises(UnsafeYAML) as caught:
        parse_yaml(nested(1001))
    assert str(caught.value) == "line 1, column 1003: nested deeper than 16 levels"


def test_values_up_to_the_limit_are_read_one_more_is_refused_where_it_is() -> None:
    # The list is a value too: the list and 9,999 numbers are 10,000.
    assert len(parse_yaml("[" + ", ".join(["1"] * (MAX_NODES - 1)) + "]")) == MAX_NODES - 1
    with pytest.raises(UnsafeYAML) as caught:
        parse_yaml("[" + ", ".join(["1"] * MAX_NODES) + "]")
    assert str(caught.value) == "line 1, column 29999: more than 10000 values"


def test_an_alias_is_refused_where_it_is() -> None:
    with pytest.raises(UnsafeYAML) as caught:
        parse_yaml("log: &l {level: info}\n\ngpu:   *l\n")
    assert str(caught.value) == "line 3, column 8: YAML aliases (*name) are not allowed"


def test_an_anchor_alone_is_fine() -> None:
    assert parse_yaml("log: &l {level: info}\n") == {"log": {"level": "info"}}


def test_other_yaml_errors_are_yamls_own() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        parse_yaml("a: [1\n")
    assert not isinstance(caught.value, UnsafeYAML)
    assert parse_yaml("") is None


@pytest.mark.parametrize("tagged", ["!!python/object/apply:builtins.str [':10911']",
                                    "!!python/name:builtins.len", "!!python/tuple [1, 2]"])
def test_python_tags_are_never_constructed_standard_tags_are(tagged: str) -> None:
    with pytest.raises(yaml.constructor.ConstructorError) as caught:
        parse_yaml(f"web:\n  listen_address: {tagged}\n")
    assert "python/" in str(caught.value)
    assert parse_yaml("web:\n  listen_address: !!str 10911\n") == {
        "web": {"listen_address": "10911"}}


def test_where_without_a_mark_is_empty() -> None:
    assert configfile._where(None) == ""
    mark = type("Mark", (), {"line": 0, "column": 9})()
    assert configfile._where(mark) == "line 1, column 10: "
    assert configfile._at(object()) == ""


def test_shown_cuts_any_other_long_repr_to_40_characters() -> None:
    """YAML gives timestamps as datetimes, whose repr is long: cut like a string."""
    value = parse_yaml("at: 2024-01-01 12:00:00.123456+05:00\n")["at"]
    assert shown(value) == "datetime.datetime(...ta(seconds=18000)))"


@pytest.mark.parametrize("closed", [1, 12])
def test_a_closed_collection_gives_back_its_one_level_only(closed: int) -> None:
    """After ``closed`` closed siblings, the limit is where it was: 16 levels are read, 17 not."""
    def doc(lists: int) -> str:  # the document's mapping, a's mapping, then ``lists`` lists
        return ("a:\n" + "".join(f"  k{i}: [[1], [2], {{x: [3]}}]\n" for i in range(closed))
                + "  deep: " + "[" * lists + "]" * lists + "\n")

    assert parse_yaml(doc(MAX_DEPTH - 2))["a"]["deep"] == eval("[" * 14 + "]" * 14)
    with pytest.raises(UnsafeYAML, match=f"^line {closed + 2}, column 23: nested deeper"):
        parse_yaml(doc(MAX_DEPTH - 1))
