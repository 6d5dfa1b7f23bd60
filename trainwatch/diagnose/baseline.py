"""A run against its baseline: the median throughput of the last runs of its experiment that
ended clean with its world size (and GPU product, where both are known), from Prometheus
(docs/design.md, "The run that got slower"). The statistics are baseline_stats'; what changed
is `compare`'s decomposition (the run against the baseline run nearest the median).

A trial is read as `compare` reads it: its lowest rank's run, over its life (start to final
push, or to now while it runs); throughput is samples/s per rank where every run counted
samples, else steps/s.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from trainwatch.cliutil import signed
from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.figures import GPU_INFO
from trainwatch.contract.promql import BY_TRIAL, by, rank_order, select
from trainwatch.diagnose import batched, compare
from trainwatch.diagnose import pin as pins
from trainwatch.diagnose.baseline_stats import LAST_RUNS, NO_BASELINE, Judgement, judge
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import UnknownTrial
from trainwatch.diagnose.history import unknown_message
from trainwatch.diagnose.runs import ENDED_CLEAN, RankKey, Run, find_runs, retention
from trainwatch.diagnose.trials import TrialRow
from trainwatch.promapi import ANY, COUNT, Kind, PrometheusAPI, largest
from trial_instrumentation import names

AUTO = "auto"
GPU_IDENTITY = GPU_INFO  # the exporter's: each GPU's uuid and product (name)


@dataclass
class Baseline:
    """A run against its baseline; ``comparison`` is `compare`'s, the run (A) against the
    baseline run nearest the median (B), where there is a baseline."""

    reference: str  # the run judged, E/T
    against: str  # "the median of the last 5 runs of E", or the pinned E/T
    unit: str  # "sample" or "step": throughput per second of one rank
    throughput: float | None
    baseline_runs: list[str]  # E/T of each baseline run, oldest first
    baseline_throughputs: list[float]
    judgement: Judgement
    comparison: compare.Comparison | None = None
    reasons: list[compare.Change] = field(default_factory=list)  # slowest phase first

    @property
    def state(self) -> str:
        return self.judgement.state

    def line(self) -> str:
        """'23% slower than the median of the last 5 runs of E (dataloader_next +21 ms per
        step explains 85%)'."""
        j = self.judgement
        if j.change is None:
            return f"{NO_BASELINE} ({j.runs} run{'' if j.runs == 1 else 's'})"
        word = "slower" if j.change < 0 else "faster"
        said = f"{abs(j.change):.0%} {word} than {self.against}"
        if j.state not in ("slower", "faster"):
            assert j.low is not None and j.high is not None  # judged: a spread
            said += (f": no change, within the baseline runs' own spread "
                     f"({signed(j.low, '.0%')} to {signed(j.high, '.0%')})")
        top = next((c for c in self.reasons if c.explained is not None), None)
        if top is not None and j.state in ("slower", "faster"):
            said += (f" ({top.phase} {signed(top.delta_seconds * 1000, '.0f')} ms per step explains "
                     f"{top.explained:.0%})")
        return said


    def as_dict(self) -> dict[str, Any]:
        """The JSON fields `check`, `diagnose` and `trials` carry (vs_baseline: the change)."""
        return {"trial": self.reference, "against": self.against, "state": self.state,
                "vs_baseline": self.judgement.change, "vs_baseline_text": self.judgement.percent,
                "line": self.line(), "unit": self.unit, "throughput": self.throughput,
                "baseline_runs": self.baseline_runs,
                "baseline_throughputs": self.baseline_throughputs,
                "judgement": dataclasses.asdict(self.judgement),
                "reasons": [dataclasses.asdict(r) for r in self.reasons]}


class Baselines:
    """Baselines of runs of one Prometheus, each run's figures read once (`trials` judges many
    runs against overlapping baselines)."""

    def __init__(self, api: PrometheusAPI, deployment: Deployment, now: float | None = None,
                 since: float | None = None, last: int = LAST_RUNS) -> None:
        self.api, self.deployment = api, deployment
        self.now = time.time() if now is None else now
        self._since = since  # default: Prometheus's retention, asked when first needed
        self.last = last
        self._runs: dict[str, list[Run]] = {}
        self._sides: dict[tuple[str, ...], compare.Side] = {}
        self._gpus: dict[tuple[str, ...], frozenset[str]] = {}
        self._rates: dict[tuple[str, ...], tuple[float | None, float | None]] = {}
        self._pins: dict[str, str | None] = {}
        self._every = False  # every experiment's runs read (read_runs)

    @property
    def since(self) -> float:
        if self._since is None:
            self._since = retention(self.api)
        return self._since

    def pin(self, experiment: str) -> str | None:
        """The trial pinned as the experiment's baseline (`trainwatch baseline set`), if any."""
        if experiment not in self._pins:
            self._pins[experiment] = pins.pinned(self.api, experiment)
        return self._pins[experiment]

    def read_pins(self, experiments: Collection[str]) -> None:
        """:meth:`pin` of several experiments, in one query."""
        if len(experiments) > 1:
            found = pins.all_pinned(self.api)
            self._pins.update({e: found.get(e) for e in experiments})

    def runs(self, experiment: str) -> list[Run]:
        if experiment not in self._runs:
            self._runs[experiment] = [] if self._every else find_runs(
                self.api, self.since, experiment, now=self.now)
        return self._runs[experiment]

    def read_runs(self, experiments: Collection[str] | None = None) -> None:
        """:meth:`runs` of several experiments (None: of every one): every experiment's runs
        found at once, then grouped (the same runs: find_runs finds each run from its own
        series)."""
        wanted = None if experiments is None else set(experiments) - set(self._runs)
        if self._every or wanted is not None and len(wanted) <= 1:
            for experiment in wanted or ():
                self.runs(experiment)
            return
        found: dict[str, list[Run]] = {e: [] for e in wanted or ()}
        for run in find_runs(self.api, self.since, now=self.now):
            found.setdefault(run.experiment, []).append(run)
        self._runs.update({e: runs for e, runs in found.items() if e not in self._runs})
        self._every = experiments is None  # an experiment not found has no run

    def trial_run(self, experiment: str, trial: str) -> Run:
        """The trial's lowest rank's latest run; UnknownTrial where there is none."""
        runs = [r for r in self.runs(experiment) if r.trial == trial]
        if not runs:
            raise UnknownTrial(unknown_message(self.api, self.since, experiment, trial, None,
                                               self.now))
        lowest = min(runs, key=lambda r: rank_order(r.rank)).rank
        return max((r for r in runs if r.rank == lowest), key=lambda r: r.first)

    def side(self, run: Run) -> compare.Side:
        key = _side_key(run)
        if key not in self._sides:
            self._sides[key] = compare.run_side(self.api, self.deployment, run,
                                                f"{run.experiment}/{run.trial}", self.now)
        return self._sides[key]

    def gpus(self, run: Run) -> frozenset[str]:
        """The GPU products the run used (trainwatch_gpu_info's name), where known."""
        if _gpus_key(run) not in self._gpus:
            self.read_gpus([run])
        return self._gpus[_gpus_key(run)]

    def read_gpus(self, runs: Collection[Run]) -> None:
        """:meth:`gpus` of every run, each read where its run is (now while it is scraped, else
        at its last sample), in a few queries for all (:func:`_per_run`): the GPUs' uuids the
        run's trainwatch_trial_gpu_info names, then the products of those uuids'
        trainwatch_gpu_info (the one join, the runs' GPUs' own series read, not every GPU's)."""
        runs = list({_gpus_key(run): run for run in runs}.values())
        by_gpu = by(*names.GROUPING_LABELS, "uuid")
        held = _per_run(self.api, runs,
                        lambda sel: f"max {by_gpu} ({select(names.GPU_INFO, sel)})")
        uuids = [sorted({labels.get("uuid", "") for labels, _ in found}) for found in held]
        # The products of the uuids of the runs read at one instant, in one item for them all.
        at: dict[float | None, set[str]] = defaultdict(set)
        for run, found in zip(runs, uuids):
            at[_instant(run)].update(found)
        instants = [instant for instant, found in at.items() if found]
        answers = batched.read(self.api, [("max by (uuid, name) ({})".format(select(
            GPU_IDENTITY, batched.any_of("uuid", sorted(at[instant])))), instant)
            for instant in instants])
        named: dict[tuple[float | None, str], set[str]] = defaultdict(set)
        for instant, answer in zip(instants, answers):
            for labels, _ in answer:
                named[(instant, labels.get("uuid", ""))].add(labels.get("name", ""))
        for run, found in zip(runs, uuids):
            self._gpus[_gpus_key(run)] = frozenset(
                name for uuid in found for name in named.get((_instant(run), uuid), ()))

    def auto(self, run: Run, unread: list[Run] | None = None) -> list[Run]:
        """The last runs of ``run``'s experiment (its rank; earlier runs under its own key
        too, as a nightly job that reuses its trial name makes) that ended clean, with its
        world size and GPU product, before it ended; oldest first. ``unread``: a run whose GPU
        products are not read yet is taken as a match and added to it, not read one by one."""
        stale_after = self.deployment.threshold(TRIAL_STALE)
        end = self.now if run.current and run.exit_reason is None else run.end
        mine = self.gpus(run)
        found: list[Run] = []
        for other in sorted(self.runs(run.experiment), key=lambda r: r.end, reverse=True):
            if len(found) == self.last:
                break
            if (other.identity == run.identity or other.rank != run.rank
                    or other.world_size != run.world_size or other.end >= end
                    or other.state(stale_after, self.now) != ENDED_CLEAN):
                continue
            if mine and unread is not None and _gpus_key(other) not in self._gpus:
                unread.append(other)
            elif mine and (theirs := self.gpus(other)) and mine != theirs:
                continue
            found.append(other)
        return found[::-1]

    def of(self, run: Run, pinned: str = AUTO, reasons: bool = True) -> Baseline:
        """``run`` against the last runs of its experiment (``pinned`` auto), or against the
        pinned trial E/T's run; ``reasons``: and what changed (compare's decomposition)."""
        others, against, minimum = self.against(run, pinned)
        return self.judged(run, others, against, minimum, reasons)

    def against(self, run: Run, pinned: str = AUTO, unread: list[Run] | None = None
                ) -> tuple[list[Run], str, int | None]:
        """What :meth:`of` judges ``run`` against: the runs, in words, and the fewest runs a
        judgement needs (None: baseline_stats' own); ``unread`` as :meth:`auto`'s."""
        pin = self.pin(run.experiment) if pinned == AUTO else None
        if pin is not None and pin != f"{run.experiment}/{run.trial}":
            pinned = pin  # `trainwatch baseline set`: the experiment's runs against that one
        if pinned == AUTO:
            others = self.auto(run, unread)
            return others, f"the median of the last {len(others)} runs of {run.experiment}", None
        experiment, trial, _ = compare.parse_reference(pinned)
        return ([self.trial_run(experiment, trial)],
                f"{pinned}, the pinned baseline" if pinned == pin else pinned, 1)

    def rates(self, run: Run) -> tuple[float | None, float | None]:
        """(samples/s, steps/s) over its life, as compare's side reads them: from the side
        where it was read, else with two queries (`trials` judges every row, no reasons)."""
        key = _side_key(run)
        if key in self._sides:
            side = self._sides[key]
            return side.samples_per_second, side.steps_per_second
        if key not in self._rates:
            self.read_rates([run])
        return self._rates[key]

    def read_rates(self, runs: Collection[Run]) -> None:
        """:meth:`rates` of every run, in a few queries for all (:func:`_per_run`): each run's
        final counts where it is (now while it is scraped, else at its last sample) over its
        life."""
        runs = list({_side_key(run): run for run in runs}.values())
        counts = {metric: [largest(found) for found in _per_run(
            self.api, runs, functools.partial(_max_by_rank, f"{metric}_total"), COUNT)]
            for metric in (names.SAMPLES, names.STEPS)}
        for run, samples, steps in zip(runs, counts[names.SAMPLES], counts[names.STEPS]):
            life = (self.now if run.current and run.exit_reason is None else run.end) - run.start
            self._rates[_side_key(run)] = (
                None if samples is None or life <= 0 else samples / life,
                None if steps is None or life <= 0 else steps / life)

    def judged(self, run: Run, others: list[Run], against: str, minimum: int | None,
               reasons: bool = True) -> Baseline:
        """``reasons``: compare the run with the baseline run nearest the median (reading
        both runs' sides)."""
        if reasons:
            self.side(run)  # its figures and phases, read once for both
        mine, theirs = self.rates(run), [self.rates(o) for o in others]
        unit = "sample" if all(r[0] for r in (mine, *theirs)) else "step"
        pick = 0 if unit == "sample" else 1
        pairs: list[tuple[float, Run]] = [(value, o) for r, o in zip(theirs, others)
                                          if (value := r[pick])]
        values = [v for v, _ in pairs]
        judgement = judge(mine[pick], values) if minimum is None else judge(
            mine[pick], values, minimum)
        base = Baseline(f"{run.experiment}/{run.trial}", against, unit, mine[pick],
                        [f"{o.experiment}/{o.trial}" for _, o in pairs], values, judgement)
        if reasons and judgement.median is not None:
            median = statistics.median(values)
            nearest = min(pairs, key=lambda pair: abs(pair[0] - median))[1]
            base.comparison = compare.compare(self.side(run), self.side(nearest))
            base.reasons = [c for c in base.comparison.changes if c.explained is not None]
        return base


def for_reports(baselines: Baselines, runs: list[Run]) -> dict[RankKey, Baseline]:
    """`diagnose`'s: one baseline per trial shown, of its lowest rank's run."""
    lowest: dict[tuple[str, str], Run] = {}
    for run in runs:
        seen = lowest.get((run.experiment, run.trial))
        if seen is None or rank_order(run.rank) < rank_order(seen.rank):
            lowest[(run.experiment, run.trial)] = run
    return {run.key: baselines.of(run) for run in lowest.values()}


def for_rows(baselines: Baselines, rows: list[TrialRow]) -> None:
    """`trials`' VS BASELINE: each row's run against the last runs of its rank; what the rows'
    judgements read is read for all of them first (:func:`read_ahead`)."""
    experiments = {row.experiment for row in rows}
    baselines.read_runs(experiments)
    first: dict[tuple[str, str, str, str, float], Run] = {}
    for experiment in sorted(experiments):
        for r in baselines.runs(experiment):
            first.setdefault((*r.key, r.pid, r.start), r)
    matched = [first.get((row.experiment, row.trial, row.rank, row.pid or "", row.started or 0.0))
               if row.started is not None else None for row in rows]
    read_ahead(baselines, [run for run in matched if run is not None])
    for row, run in zip(rows, matched):
        if run is None:
            continue
        found = baselines.of(run, reasons=False)
        row.vs_baseline, row.vs_baseline_text = found.judgement.change, found.judgement.percent
        row.baseline = found.line()


def read_ahead(baselines: Baselines, runs: list[Run]) -> None:
    """Read what judging each run against its baseline (``Baselines.of``, no reasons) reads,
    for all of them in a few queries: the pins, the runs' GPU products, then the products of
    the runs their baselines would take (in rounds: a run another product rules out makes
    way for the next), then every run's rates."""
    baselines.read_pins({run.experiment for run in runs})
    baselines.read_gpus(runs)
    while True:
        unread: list[Run] = []
        judged: list[Run] = []
        for run in runs:
            try:
                judged += baselines.against(run, unread=unread)[0]
            except UnknownTrial:  # a pinned trial that is gone: said when the row is judged
                continue
        if not unread:
            break
        baselines.read_gpus(unread)
    baselines.read_rates([*runs, *judged])


def _per_run(api: PrometheusAPI, runs: list[Run], grouped: Callable[[str], str],
             kind: Kind = ANY) -> list[batched.Vector]:
    """Each run's series of ``grouped`` (an expression by rank, of a selector's matchers), read
    where the run is: the runs read at one instant (now, for the ones scraped now) in one item
    for all of them (batched.by_rank)."""
    return batched.by_rank(api, [(run.key, _instant(run)) for run in runs], grouped, kind)


def _max_by_rank(metric: str, matched: str) -> str:
    return f"max {BY_TRIAL} ({select(metric, matched)})"


def _gpus_key(run: Run) -> tuple[str, ...]:
    return (*run.key, run.pid, str(run.first))


def _side_key(run: Run) -> tuple[str, ...]:
    return (*run.key, run.pid, run.nodename, str(run.first))


def _instant(run: Run) -> float | None:
    """Where a run's figures are read: now while it is scraped, else at its last sample."""
    return None if run.current else run.last
