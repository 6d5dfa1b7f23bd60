"""CPU training on a small host (issue 38, item 4): the trial pushes torch's intra-op threads
(trainwatch_trial_compute_threads, read on the training thread), and `trainwatch diagnose` notes
a train_batch slowed by more compute threads than free cores, decided with the deployed CPU
threshold (prometheus/thresholds.yaml, through the committed rules)."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from benchmarks.stack import REPO
from prometheus.rulegen.settings import load_settings
from tests.test_diagnose_mfu import loaded_rules
from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND
from trainwatch.diagnose import decision, render
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import RankFacts, RankReport
from trainwatch.diagnose.loader_cause import LoaderEvidence
from trial_instrumentation import Trial, names

torch = pytest.importorskip("torch")
KEY = {"experiment": "e", "trial": "t", "rank": "0"}
DEPLOYED = Deployment.from_rules(loaded_rules())
SATURATED = load_settings().threshold(CPU_SATURATED)
LOADER_AT = load_settings().threshold(DATALOADER_BOUND)
NOTE = "compute threads on"


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class Pusher:
    """Reads the gauge as a push does: on a thread of its own, started before the training
    thread changes its setting (OpenMP's setting is per thread: this one keeps the old one)."""

    def __init__(self, trial: Trial) -> None:
        self.asks: queue.Queue[bool] = queue.Queue()
        self.answers: queue.Queue[tuple[float | None, int]] = queue.Queue()
        self.trial = trial
        threading.Thread(target=self._run, daemon=True).start()
        self.read()  # its setting is made now

    def _run(self) -> None:
        while self.asks.get():
            self.answers.put((self.trial.registry.get_sample_value(names.COMPUTE_THREADS, KEY),
                              torch.get_num_threads()))

    def read(self) -> tuple[float | None, int]:
        self.asks.put(True)
        return self.answers.get(timeout=10)


def test_the_trial_pushes_the_training_threads_setting_not_the_pushers(threads: None) -> None:
    torch.set_num_threads(2)
    trial = Trial("e", "t", pull_port=0).start()
    try:
        pusher = Pusher(trial)
        assert pusher.read() == (2, 2)
        torch.set_num_threads(1)  # the script lowers it after start: each loader's first step
        for _ in trial.loader([torch.zeros(2, 2)] * 2):
            pass
        # The push says 1, the training thread's; the pusher's own thread still says 2.
        assert pusher.read() == (1, 2)
    finally:
        pusher.asks.put(False)
        trial.close()


def test_a_script_without_torch_pushes_no_compute_threads() -> None:
    script = ("import sys\nfrom trial_instrumentation import Trial, names\n"
              "trial = Trial('e', 't', pull_port=0).start()\n"
              "for _ in trial.loader([[1.0, 2.0]] * 3):\n    pass\n"
              f"print(trial.registry.get_sample_value(names.COMPUTE_THREADS, {KEY!r}), "
              "'torch' in sys.modules)\ntrial.close()\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.split() == ["None", "False"]


def judged(shares: dict[str, float], node_cpu: float, threads: float | None,
           cpu_count: float | None = 2, trial_cpu: float | None = 1.2) -> RankReport:
    r = RankReport("e", "t", "0", "node", "1", "1", "5m", node_cpu=node_cpu,
                   phases=sorted(shares.items(), key=lambda item: -item[1]))
    facts = RankFacts(shares, (None, None, None, None, None), compute_threads=threads,
                      loader_evidence=LoaderEvidence(workers=0, main_cpu=trial_cpu,
                                                     cpu_count=cpu_count,
                                                     per_worker_cpu=trial_cpu))
    decision.judge(r, facts, DEPLOYED)
    return r


def notes(r: RankReport) -> list[str]:
    assert r.verdict is not None
    return [n for n in r.verdict.notes if NOTE in n]


TRAIN_BOUND = {"train_batch": 0.69, "dataloader_next": LOADER_AT * 0.9, "to_device": 0.01}
BUSY = min(SATURATED + 0.05, 1.0)


def test_more_threads_than_free_cores_on_a_saturated_node_is_noted_with_the_figures() -> None:
    # 2 cores, all busy; the trial itself runs on 1.2 of them, other work on 0.8: 1.2 free.
    r = judged(TRAIN_BOUND, BUSY, threads=2)
    [note] = notes(r)
    assert note.startswith(f"train_batch runs 2 compute threads on "
                           f"{2 - (BUSY * 2 - 1.2):.1f} free cores of 2 (node CPU {BUSY:.1%} "
                           f"busy, {BUSY * 2 - 1.2:.1f} cores of it other work)")
    assert "torch.set_num_threads(1) or OMP_NUM_THREADS=1" in note
    assert f"  also: {note}" in render.report_text(r)


@pytest.mark.parametrize(("shares", "node_cpu", "threads", "cpu_count", "trial_cpu"), [
    (TRAIN_BOUND, BUSY, 1, 2, 1.2),  # one thread fits in the 1.2 free cores
    (TRAIN_BOUND, BUSY, 1, 2, 0.1),  # 0.1 free cores, but one thread is the least there is
    (TRAIN_BOUND, SATURATED, 2, 2, 1.2),  # at the threshold is not saturated (alert: >)
    (TRAIN_BOUND, SATURATED * 0.5, 8, 2, 0.2),  # an idle node: threads find cores
    ({"train_batch": 0.3, "dataloader_next": 0.7}, BUSY, 2, 2, 1.2),  # the loader is largest
    (TRAIN_BOUND, BUSY, None, 2, 1.2),  # no gauge (an older library, no torch): no claim
    (TRAIN_BOUND, BUSY, 2, None, 1.2),  # no host metrics: cores unknown
    (TRAIN_BOUND, BUSY, 2, 2, None),  # its own CPU unknown: every core counts as free
])
def test_no_note_where_the_threads_fit_or_a_figure_is_missing(
        shares: dict[str, float], node_cpu: float, threads: float | None,
        cpu_count: float | None, trial_cpu: float | None) -> None:
    assert notes(judged(shares, node_cpu, threads, cpu_count, trial_cpu)) == []


def test_its_own_cpu_unknown_only_more_threads_than_cores_is_noted() -> None:
    [note] = notes(judged(TRAIN_BOUND, BUSY, threads=4, trial_cpu=None))
    assert note.startswith("train_batch runs 4 compute threads on 2.0 free cores of 2")
    # The advice: as many threads as whole free cores (2.0 here), not one less than it has.
    assert "torch.set_num_threads(2) or OMP_NUM_THREADS=2 " in note, note


def test_the_advice_is_the_free_cores_rounded_down_on_a_larger_node() -> None:
    # 4 cores 93.75% busy (3.75 of them); the trial runs on 2.45: 1.3 other work, 2.7 free.
    # Three threads do not fit; two, the whole free cores, do (rounded, 2.7 would say 3).
    [note] = notes(judged(TRAIN_BOUND, 0.9375, threads=3, cpu_count=4, trial_cpu=2.45))
    assert note.startswith("train_batch runs 3 compute threads on 2.7 free cores of 4 (node CPU "
                           "93.8% busy, 1.3 cores of it other work)"), note
    assert "torch.set_num_threads(2) or OMP_NUM_THREADS=2 " in note, note
