"""`trials` reads what every row's baseline needs ahead, in a few batches
(trainwatch.diagnose.baseline.read_ahead): after it, judging each row reads nothing more, and
each judgement is the one read one run at a time gives. Checked over runs given directly, the
reads counted."""

from __future__ import annotations

from collections.abc import Collection

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwatch.diagnose.baseline import Baselines, read_ahead
from trainwatch.diagnose.runs import Run
from trial_instrumentation import names

NOW = 100_000.0
# frozenset(): unknown
PRODUCTS: tuple[frozenset[str], ...] = (frozenset({"H100"}), frozenset({"A100"}), frozenset())


class Stale:
    def threshold(self, name: str) -> float:
        return 300.0


class Counted(Baselines):
    """Baselines over given runs: each read fills its cache from what is given, and is
    recorded (the runs of each batch)."""

    def __init__(self, runs: dict[Run, tuple[frozenset[str], float]]) -> None:
        super().__init__(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
        self.given = runs
        self.gpu_reads: list[list[Run]] = []
        self.rate_reads: list[list[Run]] = []

    def pin(self, experiment: str) -> str | None:
        return None

    def runs(self, experiment: str) -> list[Run]:
        return [r for r in self.given if r.experiment == experiment]

    def read_gpus(self, runs: Collection[Run]) -> None:
        self.gpu_reads.append(list(runs))
        for run in runs:
            self._gpus[(*run.key, run.pid, str(run.first))] = self.given[run][0]

    def read_rates(self, runs: Collection[Run]) -> None:
        self.rate_reads.append(list(runs))
        for run in runs:
            self._rates[(*run.key, run.pid, run.nodename, str(run.first))] = (
                self.given[run][1], self.given[run][1] / 8)


def run(trial: int, rank: str, reason: str | None) -> Run:
    ended = 1000.0 * trial
    return Run("nightly", f"n{trial}", rank, "1", "node", "1", first=ended - 100,
               last=ended + 5, started=ended - 100, pushed=ended, exit_reason=reason)


runs_given = st.lists(st.tuples(st.sampled_from(["0", "1"]),
                                st.sampled_from([names.EXIT_CLEAN, names.EXIT_FAILED]),
                                st.sampled_from(range(len(PRODUCTS))),
                                st.floats(min_value=50, max_value=150)),
                      min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(runs_given)
def test_after_reading_ahead_every_judgement_reads_nothing_and_is_the_same(
        drawn: list[tuple[str, str, int, float]]) -> None:
    given_runs = {run(i + 1, rank, reason): (PRODUCTS[product], speed)
                  for i, (rank, reason, product, speed) in enumerate(drawn)}
    ahead, one_by_one = Counted(given_runs), Counted(given_runs)
    read_ahead(ahead, list(given_runs))
    reads = len(ahead.gpu_reads), len(ahead.rate_reads)
    for checked in given_runs:
        assert ahead.of(checked, reasons=False) == one_by_one.of(checked, reasons=False)
    assert (len(ahead.gpu_reads), len(ahead.rate_reads)) == reads  # nothing read one by one
    assert len(ahead.rate_reads) == 1
    # The rounds: the runs' own products, then the candidates; another round only where a
    # product read rules a candidate out (an unknown product never does).
    assert len(ahead.gpu_reads) <= 2 + sum(1 for product, _ in given_runs.values() if product)
    # Each run's products read once.
    read = [r for batch in ahead.gpu_reads for r in batch]
    assert len(read) == len(set(read))


def test_a_product_that_rules_runs_out_takes_another_round_for_the_next_ones() -> None:
    h100, a100 = PRODUCTS[0], PRODUCTS[1]
    older = [run(i, "0", names.EXIT_CLEAN) for i in range(1, 8)]
    checked = run(9, "0", names.EXIT_CLEAN)
    products = [h100, h100, h100, a100, a100, h100, a100]  # the newest 5: 2 of them A100s
    ahead = Counted({**{r: (p, 100.0) for r, p in zip(older, products)}, checked: (h100, 90.0)})
    read_ahead(ahead, [checked])
    assert ahead.gpu_reads == [[checked], older[2:][::-1], older[:2][::-1]]
    assert [r.trial for r in ahead.auto(checked)] == ["n1", "n2", "n3", "n6"]
    assert ahead.rate_reads == [[checked, older[0], older[1], older[2], older[5]]]


def test_every_experiments_runs_are_found_once_and_grouped(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from trainwatch.diagnose import baseline

    held = [Run(e, "t", "0", "1", "node", "1", 1.0, 2.0) for e in ("a", "b", "b")]
    asked: list[str | None] = []

    def find_runs(api: object, since: float, experiment: str | None = None,
                  **kw: object) -> list[Run]:
        asked.append(experiment)
        return [r for r in held if experiment in (None, r.experiment)]

    monkeypatch.setattr(baseline, "find_runs", find_runs)
    every = Baselines(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
    every.read_runs()
    assert (every.runs("a"), every.runs("b"), every.runs("c")) == ([held[0]], held[1:], [])
    assert asked == [None]  # one search; an experiment it did not find has no run
    some = Baselines(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
    some.read_runs(["a", "c"])  # two experiments: one search (b's runs kept too)
    some.read_runs(["b"])
    assert (some.runs("a"), some.runs("b"), some.runs("c")) == ([held[0]], held[1:], [])
    assert asked == [None, None]
    one = Baselines(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
    one.read_runs(["b"])
    assert (one.runs("b"), asked) == (held[1:], [None, None, "b"])  # one: its own search
