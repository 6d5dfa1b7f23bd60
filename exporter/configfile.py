"""Reading the config file as an attacker or an unlucky operator might hand it to us.

A config file is small, flat YAML. Everything else is refused with one line, fast: anything
but a regular file (``/dev/zero``, a FIFO that would block the open forever), a file over
``MAX_BYTES``, YAML aliases (a "billion laughs" file expands 9 levels of 9 aliases into
gigabytes), nesting deeper than ``MAX_DEPTH`` (the composer recurses once per level) and more
than ``MAX_NODES`` values (building each costs a regex match in Python).

>>> parse_yaml("web:\\n  listen_address: ':1'\\n")
{'web': {'listen_address': ':1'}}
>>> parse_yaml("a: &x [1]\\nb: *x\\n")
Traceback (most recent call last):
...
exporter.configfile.UnsafeYAML: line 2, column 4: YAML aliases (*name) are not allowed
"""

from __future__ import annotations

import os
import reprlib
import stat
from typing import Any

MAX_BYTES = 256 * 1024  # thousands of users' hashes; a config file is a few hundred bytes
MAX_DEPTH = 16  # the deepest real setting is section > basic_auth_users > user
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
MAX_NODES = 10_000  # values and collections; building 50,000 took 1-7 s here

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlevel = 40, 40, 2
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 4


def shown(value: Any) -> str:
    """``repr(value)``, bounded in time and length: error messages quote what they refuse.

    >>> shown("x" * 1000)
    "'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"
    >>> shown([[1, 2, 3, 4, 5]] * 9)
    '[[1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1, 2, 3, 4, ...], ...]'
    """
    return _short.repr(value)


def cut(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters: a key name from a file may be any length."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


class UnsafeYAML(ValueError):
    """YAML the exporter refuses to build (aliases, deep nesting); the message says where."""


def read_text(path: str) -> str:
    """The text of a regular file of at most ``MAX_BYTES``; ``OSError``/``ValueError`` else."""
    # O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MAX_BYTES:
            raise ValueError(f"{info.st_size} bytes, over the limit of {MAX_BYTES}")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_BYTES + 1)  # it may have grown since fstat
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"over the limit of {MAX_BYTES} bytes")
    return data.decode("utf-8")


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses aliases, deep nesting and huge documents (``UnsafeYAML``).

    The events are checked first, without building anything: libyaml's parser is iterative,
    where the composer would recurse once per level and the constructor would expand aliases.
    """
    import yaml  # only with --config: keeps the exporter's startup and memory light

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_events(yaml, yaml.parse(text, Loader=loader))
    except yaml.MarkedYAMLError as err:
        # libyaml 0.2.5's scanner (PyYAML 6.0.4's wheels) has its own depth limit, and it scans
        # ahead of the events: the same refusal, in the same words, whichever trips first.
        if "maximum nesting depth" not in str(err.problem or ""):
            raise
        raise UnsafeYAML(f"{_where(err.problem_mark)}{TOO_DEEP}") from None
    return yaml.load(text, Loader=loader)  # a safe loader; checked above


def _check_events(yaml: Any, events: Any) -> None:
    """Raise UnsafeYAML at the first alias, past MAX_NODES values or past MAX_DEPTH levels."""
    depth = nodes = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise UnsafeYAML(f"{_at(event)}YAML aliases (*name) are not allowed")
        if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            nodes += 1
            if nodes > MAX_NODES:
                raise UnsafeYAML(f"{_at(event)}more than {MAX_NODES} values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise UnsafeYAML(f"{_at(event)}{TOO_DEEP}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _at(event: Any) -> str:
    return _where(getattr(event, "start_mark", None))


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""

