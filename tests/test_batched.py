"""Many instant queries in a few requests (trainwatch.diagnose.batched): the items grouped into
batches and each answer split back to its item, checked without a Prometheus; then against a
real one (a backfilled block), each item's answer the same as its own instant query's."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.stack import promtool, start_prometheus
from trainwatch import promapi
from trainwatch.diagnose import batched
from trainwatch.promapi import COUNT, PrometheusAPI, PrometheusError

texts = st.lists(st.text(alphabet="ab", min_size=1, max_size=40), max_size=60)


@given(texts, st.integers(min_value=1, max_value=200))
def test_batches_hold_every_item_once_in_order_each_within_the_limit(items: list[str],
                                                                   limit: int) -> None:
    batches = batched.chunks(items, limit)
    assert [i for part in batches for i in part] == list(range(len(items)))
    for part in batches:
        joined = batched.either([items[i] for i in part])
        assert len(part) == 1 or len(joined) <= limit
        # As full as the limit lets it be: the next item would not have fitted.
        if part.stop < len(items):
            assert len(batched.either([items[i] for i in range(part.start, part.stop + 1)])
                       ) > limit


@given(st.lists(st.text(alphabet="ab", min_size=1, max_size=5), min_size=1, max_size=30))
def test_the_or_tree_holds_each_item_once_in_order(items: list[str]) -> None:
    joined = batched.either(items)
    assert re.findall(r"[ab]+", joined) == items
    assert joined.count(" or ") == len(items) - 1


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=20),
       st.integers(min_value=0, max_value=50))
def test_an_answer_is_split_back_to_the_items_by_their_tags(owners: list[int],
                                                           start: int) -> None:
    indices = range(start, start + 4)
    answer = [({"rank": str(n), batched.ITEM: str(start + owner)}, float(n))
              for n, owner in enumerate(owners)]
    found = batched.split(answer, indices)
    assert sorted(found) == list(indices)  # an item without series: an empty vector
    for index, vector in found.items():
        assert [int(labels["rank"]) for labels, _ in vector] == [
            n for n, owner in enumerate(owners) if start + owner == index]
        assert all(batched.ITEM not in labels for labels, _ in vector)


@pytest.mark.parametrize("tag", ["4", "", "x", "-1"])
def test_a_series_tagged_outside_the_batch_is_refused(tag: str) -> None:
    with pytest.raises(ValueError, match="outside the batch"):
        batched.split([({batched.ITEM: tag}, 1.0)], range(4))


class Echo:
    """A stand-in for PrometheusAPI that answers each tagged item of a query with one series
    whose value is the item's instant: what the batch asked is visible in what comes back."""

    url = "http://echo"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
        self.queries.append(expr)
        pairs = re.findall(r"@ ([0-9.]+)\), \"" + batched.ITEM + r"\", \"(\d+)\"", expr)
        return [({batched.ITEM: tag, "job": "x"}, float(at)) for at, tag in pairs]

    def pinned(self, at: float | None) -> Pinned:
        """A batch of one item: asked as it is, at its instant."""
        self.queries.append(f"alone at {at}")
        return Pinned(at)


class Pinned:
    def __init__(self, at: float | None) -> None:
        self.at = at

    def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
        assert batched.ITEM not in expr and self.at is not None
        return [({"job": "x"}, self.at)]


def test_each_item_gets_its_own_answer_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batched, "MAX_QUERY_CHARS", 300)
    api = Echo()
    items = [(f"x{{i=\"{i}\"}}", 1000.0 + i) for i in range(25)]
    found = batched.read(api, items, readers=3)  # type: ignore[arg-type]
    assert len(api.queries) > 3  # several batches, asked on several threads
    assert len(api.queries) == len(batched.chunks(
        [batched.tagged(batched.at(e, t), i) for i, (e, t) in enumerate(items)]))
    assert found == [[({"job": "x"}, 1000.0 + i)] for i in range(25)]


def test_an_untagged_answer_is_a_prometheus_error_naming_the_server() -> None:
    class Untagged(Echo):
        def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
            return [({"job": "x"}, 1.0)]

    with pytest.raises(PrometheusError, match="http://echo"):
        batched.read(Untagged(), [("a", 1.0), ("b", 2.0)])  # type: ignore[arg-type]


# --- against a real Prometheus ------------------------------------------------------------

BASE = 1_700_000_000
# One counter under one label set, two runs: 0..600 s counting 1/s, a restart (a reset) and
# 700..1000 s counting 3/s; a gap of 100 s between them, no sample after 1000.
RANK_0 = {"__name__": "c_total", "rank": "0"}  # its first series, as Prometheus answers it
SAMPLES = [(BASE + t, t) for t in range(0, 601, 15)] + [
    (BASE + t, 3 * (t - 700)) for t in range(700, 1001, 15)]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusAPI]:
    workdir = tmp_path_factory.mktemp("batched")
    source = workdir / "c.om"
    lines = [f'c_total{{rank="{rank}"}} {v * (rank + 1)} {t}' for rank in range(2)
             for t, v in SAMPLES]
    source.write_text("# TYPE c counter\n" + "\n".join(lines) + "\n# EOF\n")
    promtool("tsdb", "create-blocks-from", "openmetrics", source, workdir / "tsdb")
    with start_prometheus(workdir, {"global": {"scrape_interval": "1m"}},
                          "--storage.tsdb.retention.time=100y") as prom:
        yield PrometheusAPI(prom.url)


def test_a_batch_answers_as_each_items_own_instant_query(api: PrometheusAPI) -> None:
    exprs = ['c_total{rank="0"}', "c_total", "max(c_total)",
             'max(avg_over_time(c_total{rank="1"}[60s] offset 30s))',
             'increase(c_total{rank="0"}[300s])']
    # Within each run, at its last sample, in the gap (the lookback still sees the first run's
    # last sample), and past the lookback (nothing).
    instants = [BASE + 300, BASE + 600, BASE + 650.5, BASE + 1000, BASE + 1400]
    items = [(e, float(t)) for e in exprs for t in instants]
    found = batched.read(api, items)
    # Long enough to go as a form body (POST), past what a proxy takes in a URL.
    asked = batched.either([batched.tagged(batched.at(e, t), i)
                            for i, (e, t) in enumerate(items)])
    assert len(urllib.parse.urlencode({"query": asked})) > promapi.POST_PAST
    for (expr, instant), vector in zip(items, found):
        assert sorted(vector, key=str) == sorted(api.pinned(instant).query(expr), key=str), (
            expr, instant)
    by_item = dict(zip(items, found))
    # The same series at two instants of two runs: each its own value, never merged.
    assert by_item[('c_total{rank="0"}', BASE + 600.0)] == [(RANK_0, 600.0)]
    assert by_item[('c_total{rank="0"}', BASE + 1000.0)] == [(RANK_0, 900.0)]
    assert by_item[('c_total{rank="0"}', BASE + 300.0)] == [(RANK_0, 300.0)]
    assert by_item[('c_total{rank="0"}', BASE + 1400.0)] == []
    assert len(by_item[("c_total", BASE + 650.5)]) == 2


def test_values_are_each_items_largest_as_value_reads_it(api: PrometheusAPI) -> None:
    items = [('c_total{rank="1"}', float(BASE + 600)), ('c_total{rank="1"}', float(BASE + 1000)),
             ("c_total", float(BASE + 1400))]
    assert batched.values(api, items, COUNT) == [1200.0, 1800.0, None]
    assert batched.values(api, items, COUNT) == [api.pinned(t).value(e, COUNT)
                                                 for e, t in items]


# --- by rank: the ranks read at one instant in one item ------------------------------------

def _matches(matched: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` pass the matchers batched.matching wrote (= and =~ of plain values)."""
    for label, op, value in re.findall(r'(\w+)(=~|=)"([^"]*)"', matched):
        wanted = value.split("|") if op == "=~" else [value]
        if labels.get(label, "") not in wanted:
            return False
    return True


keys = st.tuples(st.sampled_from("ef"), st.sampled_from("tu"), st.sampled_from("0123"))


@given(st.lists(st.tuples(keys, st.sampled_from([None, 10.0, 20.0])), unique=True,
                max_size=30),
       st.lists(keys, max_size=10))
def test_each_rank_gets_its_own_series_at_its_own_instant(
        asked: list[tuple[tuple[str, str, str], float | None]],
        others: list[tuple[str, str, str]]) -> None:
    """Prometheus holds every rank asked and others at every instant, with a value naming
    both: each rank gets its own series at its own instant, none of another rank or instant."""
    held = {key for key, _ in asked} | set(others)

    def series(instant: float | None) -> list[tuple[dict[str, str], float]]:
        return [({"experiment": e, "trial": t, "rank": r, "job": "x"},
                 float(hash((e, t, r, instant)) % 1000)) for e, t, r in sorted(held)]

    def read(api: object, items: list[batched.Item], kind: str) -> list[batched.Vector]:
        assert len({instant for _, instant in items}) == len(items)  # one item an instant
        return [[(labels, v) for labels, v in series(instant) if _matches(expr, labels)]
                for expr, instant in items]

    mp = pytest.MonkeyPatch()
    mp.setattr(batched, "read", read)
    try:
        found = batched.by_rank(None, asked, lambda matched: matched)  # type: ignore[arg-type]
    finally:
        mp.undo()
    assert found == [[(labels, v) for labels, v in series(instant)
                      if (labels["experiment"], labels["trial"], labels["rank"]) == key]
                     for key, instant in asked]


def test_two_runs_of_one_rank_read_at_one_instant_each_get_its_series(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One item for the instant; its rank's series go to every run of that rank asked there
    (the earlier as well as the later), and no other rank's."""
    zero, one = ("e", "t", "0"), ("e", "t", "1")
    answer = [({"experiment": "e", "trial": "t", "rank": "1"}, 7.0),
              ({"experiment": "e", "trial": "t", "rank": "0"}, 3.0)]
    items: list[list[batched.Item]] = []

    def read(api: object, asked: list[batched.Item], kind: str) -> list[batched.Vector]:
        items.append(asked)
        return [answer for _ in asked]

    monkeypatch.setattr(batched, "read", read)
    found = batched.by_rank(None, [(zero, 20.0), (one, 20.0), (zero, 20.0)],  # type: ignore[arg-type]
                            lambda matched: matched)
    assert [len(asked) for asked in items] == [1]
    assert found == [[answer[1]], [answer[0]], [answer[1]]]


def test_by_rank_against_prometheus_is_each_ranks_own_query(api: PrometheusAPI) -> None:
    ranks = [(("", "", "0"), float(BASE + 600)), (("", "", "1"), float(BASE + 600)),
             (("", "", "1"), float(BASE + 1000)), (("", "", "0"), None)]
    found = batched.by_rank(api, ranks, lambda matched: f"max by (rank) (c_total{{{matched}}})")
    assert found == [api.pinned(t).query(f'max by (rank) (c_total{{rank="{key[2]}"}})')
                     for key, t in ranks]
    assert [v for [(_, v)] in found[:3]] == [600.0, 1200.0, 1800.0]
    assert found[3] == []  # now: nothing scraped


def test_a_prometheus_without_the_at_modifier_is_asked_item_by_item() -> None:
    """Before 2.33 (or without its feature flag) Prometheus refuses ``@``: each item is then
    asked alone at its instant, and each still gets its own answer."""
    class Old(Echo):
        def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
            raise PrometheusError("Prometheus at http://echo: query failed: 1:20: parse "
                                  "error: @ modifier is disabled")

    api = Old()
    found = batched.read(api, [("a", 1.0), ("b", 2.0), ("c", 3.0)])  # type: ignore[arg-type]
    assert found == [[({"job": "x"}, 1.0)], [({"job": "x"}, 2.0)], [({"job": "x"}, 3.0)]]
    assert api.queries == ["alone at 1.0", "alone at 2.0", "alone at 3.0"]

    class Broken(Old):
        def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
            raise PrometheusError("Prometheus at http://echo: query failed: out of memory")

    with pytest.raises(PrometheusError, match="out of memory"):
        batched.read(Broken(), [("a", 1.0), ("b", 2.0)])  # type: ignore[arg-type]


# --- issue 36: what the mutation run of batched.py showed untested ------------------------

def test_a_split_series_keeps_every_label_but_the_tag_whatever_it_sorts_after() -> None:
    labels = {"__name__": "x", "rank": "0", "uuid": "GPU-1", "zone": "a", batched.ITEM: "1"}
    found = batched.split([(labels, 2.0)], range(3))
    assert found == {0: [], 1: [({"__name__": "x", "rank": "0", "uuid": "GPU-1", "zone": "a"},
                                 2.0)], 2: []}


def test_without_the_at_modifier_an_item_read_now_is_asked_now_not_pinned() -> None:
    """The fallback item by item: an item with an instant is asked pinned at it, one without
    (read at the query's instant) of the API itself, never pinned."""
    class Old(Echo):
        def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
            if "@" in expr:
                raise PrometheusError("Prometheus at http://echo: query failed: 1:20: parse "
                                      "error: @ modifier is disabled")
            self.queries.append(f"now {expr}")
            return [({"job": "now"}, -1.0)]

    api = Old()
    found = batched.read(api, [("a", 1.0), ("b", None), ("c", 3.0)])  # type: ignore[arg-type]
    assert found == [[({"job": "x"}, 1.0)], [({"job": "now"}, -1.0)], [({"job": "x"}, 3.0)]]
    assert [q for q in api.queries if not q.startswith("(")] == [
        "alone at 1.0", "now b", "alone at 3.0"]


def test_a_batch_of_one_item_is_asked_as_its_own_query_at_its_instant() -> None:
    api = Echo()
    assert batched.read(api, [("a", 5.0)]) == [[({"job": "x"}, 5.0)]]  # type: ignore[arg-type]
    assert api.queries == ["alone at 5.0"]  # not a tagged `@` subquery


@pytest.mark.parametrize(("texts", "limit", "expected"), [
    # "(aaaa or bbbb)" is 14 characters: exactly the limit, one batch.
    (["aaaa", "bbbb", "cccc"], 14, [range(2), range(2, 3)]),
    # One character over: two batches.
    (["aaaa", "bbbbb"], 14, [range(1), range(1, 2)]),
    # A batch begun after a cut counts from nothing too: its exact fit is kept whole.
    (["a" * 10, "aaaa", "bbbb"], 14, [range(1), range(1, 3)]),
    (["a" * 10, "aaaa", "bbbbb"], 14, [range(1), range(1, 2), range(2, 3)]),
    # An item longer than the limit goes alone, and its neighbours are not held back by it.
    (["ab", "a" * 30, "ab", "cd"], 10, [range(1), range(1, 2), range(2, 4)]),
    ([], 14, []),
])
def test_batches_are_cut_exactly_at_the_limit(texts: list[str], limit: int,
                                              expected: list[range]) -> None:
    assert batched.chunks(texts, limit) == expected


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_every_batch_is_asked_whatever_their_number(monkeypatch: pytest.MonkeyPatch,
                                                    count: int) -> None:
    """No item, one batch, two, three (each item alone under a tiny limit): every item answered,
    each once, and nothing asked for no item."""
    monkeypatch.setattr(batched, "MAX_QUERY_CHARS", 1)
    api = Echo()
    items = [(f"x{i}", 10.0 + i) for i in range(count)]
    assert batched.read(api, items) == [[({"job": "x"}, 10.0 + i)]  # type: ignore[arg-type]
                                        for i in range(count)]
    assert sorted(api.queries) == [f"alone at {10.0 + i}" for i in range(count)]


def test_a_query_holds_up_to_twenty_thousand_characters_and_not_one_more() -> None:
    """The default cut (MAX_QUERY_CHARS): two items joined into exactly 20,000 characters are
    one query; one character more, two."""
    assert len(batched.either(["a" * 9997, "b" * 9997])) == 20_000
    assert batched.chunks(["a" * 9997, "b" * 9997]) == [range(2)]
    assert batched.chunks(["a" * 9997, "b" * 9998]) == [range(1), range(1, 2)]
