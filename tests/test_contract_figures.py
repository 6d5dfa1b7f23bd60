"""trainwatch/contract/figures.py: the figures' PromQL text, rendered without a stack."""

from __future__ import annotations

from trainwatch.contract import figures


def test_indent_puts_two_spaces_before_every_line() -> None:
    assert figures.indent("a\nb c\n  d") == "  a\n  b c\n    d"


def test_over_life_divides_by_the_life_and_a_zero_life_by_a_millisecond() -> None:
    span = figures.over_life(60.0, 0.5)
    assert span("rate(x[60s])") == "(\n  rate(x[60s])\n)\n* 60\n/ 0.5"
    assert figures.over_life(60.0, 0.0)("r").endswith("\n/ 0.001")
    assert figures.over_life(60.0, -3.0)("r").endswith("\n/ 0.001")
    assert figures.over_life(120.0, 37.25)("r") == "(\n  r\n)\n* 120\n/ 37.25"
