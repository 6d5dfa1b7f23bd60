"""Many instant queries, each at its own instant, asked in a few requests.

`trials` reads every ended run where its numbers are, at its last sample: the same few
expressions, each at another instant. One request per run and expression was thousands of
round trips over a week of a fleet's runs (2 ms each, and more on a loaded Prometheus). Here
the expressions of many runs go in one query: each one evaluated at its own instant (PromQL's
``@`` modifier, on a one-point subquery: ``last_over_time((E)[1ms:1ms] @ T)`` is what an
instant query of E at T answers), tagged with its place in the list (``label_replace`` onto
:data:`ITEM`), and joined with ``or``, which keeps every series apart since no two items share
a tag (two runs of one rank, read at two instants, included); the answer is split back by the
tag. An item already pinned (its own ``@``) or read at the query's instant is only tagged; a
batch of one item is asked as it is, at its instant.

The ``or`` is a balanced tree, not a chain: Prometheus evaluates ``a or b`` by indexing its
left side's series, so a chain of n items indexes n times a growing left side (400 items of
one rank's phase sums took 2.7-3.6 s chained, 0.75 s as a tree, against Prometheus 2.42); and a
query holds a few dozen items (MAX_QUERY_CHARS), as a few hundred cost more per item again.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainwatch.contract.promql import GROUPING_LABELS, RankKey, escape, matchers, rank_key
from trainwatch.promapi import ANY, Kind, Labels, PrometheusAPI, PrometheusError, largest

ITEM = "trainwatch_batch_item"  # the tag: an item's index in the list asked
# One query's expression text at most: 40 items of `trials`' longest (its node-CPU join), 100
# of its shortest; sent as a form body past promapi.POST_PAST, so no URL limit applies.
MAX_QUERY_CHARS = 20_000
READERS = 4  # queries asked at once (a Prometheus answers queries concurrently)

_JOIN = len("( or )")  # what either() adds per item joined
Item = tuple[str, float | None]  # an expression and the instant to read it at (None: as is)
Vector = list[tuple[Labels, float]]


def at(expr: str, instant: float | None) -> str:
    """``expr`` evaluated at ``instant`` (Unix seconds, to the millisecond, as an instant
    query's ``time``); ``expr`` itself where ``instant`` is None.

    >>> at("max(x)", 1700000000.25)
    'last_over_time((max(x))[1ms:1ms] @ 1700000000.250)'
    """
    return expr if instant is None else f"last_over_time(({expr})[1ms:1ms] @ {instant:.3f})"


def tagged(expr: str, index: int) -> str:
    """``expr`` with every series labelled ``ITEM="index"``.

    >>> tagged("x", 3)
    'label_replace(x, "trainwatch_batch_item", "3", "", "")'
    """
    return f'label_replace({expr}, "{ITEM}", "{index}", "", "")'


def either(texts: Sequence[str]) -> str:
    """The texts joined with ``or`` as a balanced tree.

    >>> either(["a", "b", "c"])
    '(a or (b or c))'
    """
    if len(texts) == 1:
        return texts[0]
    half = len(texts) // 2
    return f"({either(texts[:half])} or {either(texts[half:])})"


def any_of(label: str, values: Sequence[str]) -> str:
    """A matcher of ``label`` equal to any of ``values`` ("" matches the label's absence, as
    an ``on (label)`` join matches it): one selector for many series.

    >>> print(any_of("uuid", ["GPU-1.a", ""]))
    uuid=~"GPU\\\\-1\\\\.a|"
    """
    return f'{label}=~"{escape("|".join(map(re.escape, values)))}"'


def chunks(texts: Sequence[str], limit: int | None = None) -> list[range]:
    """The items' indices in consecutive runs whose texts, joined with ``or`` (:func:`either`),
    stay within ``limit`` characters (default MAX_QUERY_CHARS; an item longer than that
    alone)."""
    limit = MAX_QUERY_CHARS if limit is None else limit
    found: list[range] = []
    start, size = 0, 0
    for i, text in enumerate(texts):
        if i > start and size + _JOIN + len(text) > limit:
            found.append(range(start, i))
            start, size = i, 0
        size += (_JOIN if i > start else 0) + len(text)
    if start < len(texts):
        found.append(range(start, len(texts)))
    return found


def split(answer: Vector, indices: range) -> dict[int, Vector]:
    """The answer to one batch, back by item: each series without the tag, under its item's
    index (an item with no series gets an empty vector). A series tagged with no index of
    the batch is an answer Prometheus would not give: ValueError."""
    found: dict[int, Vector] = {i: [] for i in indices}
    for labels, value in answer:
        tag = labels.get(ITEM, "")
        index = int(tag) if tag.isdigit() else -1
        if index not in found:
            raise ValueError(f"a series tagged {ITEM}={tag!r}, outside the batch {indices}")
        found[index].append(({k: v for k, v in labels.items() if k != ITEM}, value))
    return found


def read(api: PrometheusAPI, items: Sequence[Item], kind: Kind = ANY,
         readers: int = READERS) -> list[Vector]:
    """Each item's vector, as ``api.pinned(instant).query(expr)`` answers it, in order; in
    as few queries as MAX_QUERY_CHARS allows, ``readers`` of them at once."""
    texts = [tagged(at(expr, instant), i) for i, (expr, instant) in enumerate(items)]
    batches = chunks(texts)

    def ask(indices: range) -> dict[int, Vector]:
        if len(indices) == 1:  # alone: the query it always was, at its instant
            expr, instant = items[indices[0]]
            return {indices[0]: (api if instant is None else api.pinned(instant)).query(expr, kind)}
        try:
            return split(api.query(either([texts[i] for i in indices]), kind), indices)
        except ValueError as err:
            raise PrometheusError(f"Prometheus at {api.url} answered a batch of queries "
                                  f"with {err}") from None
        except PrometheusError as err:
            if "@ modifier" not in str(err):
                raise
            # A Prometheus before 2.33 (without --enable-feature=promql-at-modifier): each
            # item alone, at its instant, as before batches.
            return {i: (api if items[i][1] is None else api.pinned(items[i][1])).query(
                items[i][0], kind) for i in indices}

    found: dict[int, Vector] = {}
    if len(batches) == 1:
        found.update(ask(batches[0]))
    elif batches:
        with ThreadPoolExecutor(min(readers, len(batches))) as pool:
            for part in pool.map(ask, batches):
                found.update(part)
    return [found[i] for i in range(len(items))]


def by_rank(api: PrometheusAPI, ranks: Sequence[tuple[RankKey, float | None]],
            grouped: Callable[[str], str], kind: Kind = ANY) -> list[Vector]:
    """Each rank's series of ``grouped`` (an expression that keeps the ranks' labels apart, of
    a selector's matchers) at the instant given with it: the ranks read at one instant in one
    item (:func:`matching` their keys), its answer split back by rank. A fleet's ranks of one
    trial end in one scrape: one item for all of them where one per rank was asked."""
    return in_groups(api, ranks, lambda matched, instant: (grouped(matched), instant), kind)


def in_groups(api: PrometheusAPI, ranks: Sequence[tuple[RankKey, Hashable]],
              item: Callable[[str, Any], Item], kind: Kind = ANY) -> list[Vector]:
    """:func:`by_rank` with any group: the ranks given one group (instant, range, ...) are one
    item, ``item(matchers, group)``, its answer split back by rank."""
    together: dict[Hashable, list[int]] = defaultdict(list)
    for i, (_, group) in enumerate(ranks):
        together[group].append(i)
    groups = list(together.items())
    answers = read(api, [item(matching([ranks[i][0] for i in indices]), group)
                         for group, indices in groups], kind)
    found: list[Vector] = [[] for _ in ranks]
    for (_, indices), answer in zip(groups, answers):
        mine: dict[RankKey, list[int]] = defaultdict(list)  # two runs of one rank: both
        for i in indices:
            mine[ranks[i][0]].append(i)
        for labels, value in answer:
            for index in mine.get(rank_key(labels), []):
                found[index].append((labels, value))
    return found


def matching(keys: Sequence[RankKey]) -> str:
    """Matchers of every rank in ``keys`` (and maybe others, which the caller leaves out): each
    grouping label equal to its one value, or to any of its values.

    >>> matching([("e", "t", "0"), ("e", "t", "1")])
    'rank=~"0|1", experiment="e", trial="t"'
    """
    one: dict[str, str | None] = {}
    many = []
    for label, values in zip(GROUPING_LABELS, map(sorted, map(set, zip(*keys)))):
        if len(values) == 1:
            one[label] = values[0]
        else:
            many.append(any_of(label, values))
    return matchers(*many, **one)


def values(api: PrometheusAPI, items: Sequence[Item], kind: Kind = ANY,
           readers: int = READERS) -> list[float | None]:
    """Each item's largest value, as ``PrometheusAPI.value`` reads one (``max``, NaN as
    none)."""
    return [largest(vector) for vector in
            read(api, [(f"max({expr})", instant) for expr, instant in items], kind, readers)]
