"""The example a refused flag value is answered with (cliutil.EXAMPLES, `... (e.g. --since 1h)`)
is one the flag takes: for every option of every `trainwatch` command that shows one of its
words, the example parses with the option's own type."""

from __future__ import annotations

import re

from tests.test_cli_metavars_unit import commands
from trainwatch.cliutil import EXAMPLES

WORD = re.compile(r"[A-Z]+\Z")  # DURATION, URL, ...: not FILE.html or E/T[/RANK]


def shown() -> list[tuple[str, str, object, str]]:
    return [(name, a.option_strings[-1], a.type, a.metavar)
            for name, parser in commands().items() for a in parser._actions
            if a.option_strings and isinstance(a.metavar, str) and WORD.match(a.metavar)]


def test_every_example_is_one_the_option_takes() -> None:
    checked = 0
    for name, option, parse, word in shown():
        assert word in EXAMPLES, (name, option, word)
        if callable(parse):
            parse(EXAMPLES[word])  # raises where the example would be refused too
            checked += 1
    assert checked > 20  # durations, times, ports, paths, steps: not a vacuous pass


def test_each_example_is_for_a_word_some_option_shows() -> None:
    assert set(EXAMPLES) - {word for *_, word in shown()} == set()


def test_the_examples_differ_by_kind() -> None:
    # A duration, a time, a port and a URL each read as what they are.
    assert re.fullmatch(r"\d+[smhd]", EXAMPLES["DURATION"])
    assert EXAMPLES["URL"].startswith("http://") and EXAMPLES["PORT"].isdigit()
    assert EXAMPLES["TIME"].endswith("Z") and "%" in EXAMPLES["PERCENT"]
    assert "." in EXAMPLES["FILE"] and EXAMPLES["DIR"].startswith("/")  # a file, a folder
