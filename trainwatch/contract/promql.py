"""The PromQL building blocks shared by the rules, the dashboards and the CLI's queries.

>>> select("up", 'job="x"', "", trial='a"b')
'up{job="x", trial="a\\\\"b"}'
>>> f"sum {BY_TRIAL} (x)"
'sum by (experiment, trial, rank) (x)'
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trial_instrumentation.names import GROUPING_LABELS

# A trial's identity: the Pushgateway grouping key of trial_instrumentation.
TRIAL_LABELS = GROUPING_LABELS
# One rank of a trial as a key: its TRIAL_LABELS' values ("" where a label is missing).
RankKey = tuple[str, str, str]


def rank_key(labels: Mapping[str, str]) -> RankKey:
    return labels.get("experiment", ""), labels.get("trial", ""), labels.get("rank", "")


def rank_order(rank: str) -> tuple[bool, int, str]:
    """Ranks by number (``"2"`` before ``"10"``, however many digits), a rank that is not one
    (a label a run could set: ``"x"``, ``"²"``) after them all, by its text.

    >>> sorted(["x", "10", "007", "2", "99999999999"], key=rank_order)
    ['2', '007', '10', '99999999999', 'x']
    """
    if not (rank.isascii() and rank.isdigit()):  # int() takes "²" for no number, "٣" for 3
        return True, 0, rank
    digits = rank.lstrip("0")  # compared as text: no int() of a label 5,000 digits long
    return False, len(digits), digits


def rank_sort_key(labels: Mapping[str, str]) -> tuple[str, str, tuple[bool, int, str]]:
    """A trial rank's labels in the order every listing uses: experiment, trial, then rank by
    number (rank_order)."""
    return labels.get("experiment", ""), labels.get("trial", ""), rank_order(labels.get("rank", ""))

# A GPU's identity on the exporter side (instance comes from the scrape target).
GPU_LABELS = ("instance", "gpu", "uuid")


def by(*labels: str) -> str:
    return f"by ({', '.join(labels)})"


def on(*labels: str) -> str:
    return f"on ({', '.join(labels)})"


BY_TRIAL = by(*TRIAL_LABELS)


def select(metric: str, *written: str, **labels: str | None) -> str:
    """A selector: the ``written`` matchers as they are (empty ones skipped), then ``labels`` as
    equality matchers with their values escaped (None ones skipped)."""
    inner = matchers(*written, **labels)
    return f"{metric}{{{inner}}}" if inner else metric


def matchers(*written: str, **labels: str | None) -> str:
    """What goes between a selector's braces (see :func:`select`)."""
    inner = [m for m in written if m]
    inner += [f'{k}="{escape(v)}"' for k, v in labels.items() if v is not None]
    return ", ".join(inner)


def escape(value: str) -> str:
    r"""A label value as a PromQL string literal's inside: every character that is not
    printable as its Unicode escape (CR, U+2028 and the like would end a line of an
    expression that is indented or inlined, and a raw newline ends the literal).

    >>> escape('a"b\\c\nd\r\u2028é')
    'a\\"b\\\\c\\u000ad\\u000d\\u2028é'
    """
    value = value.replace("\\", "\\\\").replace('"', '\\"')
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else
                   f"\\u{ord(c):04x}" if c <= "\uffff" else f"\\U{ord(c):08x}"  # BMP: \u
                   for c in value)


def number(value: float) -> str:
    """A threshold as PromQL writes it: 0.3 -> '0.3', 300.0 -> '300'."""
    return f"{value:g}"


def inline(expr: str, records: Mapping[str, str], within: tuple[str, ...] = ()) -> str:
    """``expr`` with each record of ``records`` it reads bare (as a chained rule reads the
    intermediate rates before it) written as that record's own expression, in parentheses,
    all the way down: the rule as one expression over the raw series, for a time its records
    were not evaluated. A reference with matchers (``x{phase="a"}``) stays, and so does a
    record's reference to itself or to a record it is ``within`` (a rule that reads its own
    earlier value).

    >>> inline("a:b:rate5m / c:d:rate5m", {"a:b:rate5m": "sum(rate(a[5m]))", "c:d:rate5m": "e"})
    '(sum(rate(a[5m]))) / (e)'
    >>> inline("x:y", {"x:y": "f or x:y offset 1m"}, within=("x:y",))
    'x:y'
    >>> inline("x:y + 1", {"x:y": "f or x:y offset 1m"})
    '(f or x:y offset 1m) + 1'
    """
    def written(found: re.Match[str]) -> str:
        name = found[0]
        if name not in records or name in within:
            return name
        return f"({inline(records[name], records, (*within, name))})"

    return _BARE.sub(written, expr)


# A metric name not part of a longer name and not followed by matchers.
_BARE = re.compile(r"(?<![\w:])[a-zA-Z_:][\w:]*(?![\w:{(])")
