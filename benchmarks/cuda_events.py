"""The ``cuda_events`` timing mode's cost: a CPU-side mode that runs everywhere (stand-in
events) and a GPU mode (skipped without CUDA). Run by ``instrumentation_overhead.py``, or:

    .venv/bin/python -m benchmarks.cuda_events [--rounds 7] [--steps 200]

CPU side: (1) the hot path, one phase's enter + exit, with stand-in events whose ``record()``
does nothing (so what is left is trainwatch's own bookkeeping, not the driver's); (2) the
resolver thread's toll on a training thread that needs the GIL all the time (a stand-in for
a launch-bound loop: 2 ms of Python per step, five phases), with the resolver waking every
2 ms (the old design) and every ``POLL_SECONDS`` (now), against the same loop timed by
``wall``. GPU: bare / ``wall`` / ``cuda_events`` / ``cuda_sync`` step times of a launch-bound
loop (a small MLP) and a GPU-bound one (large matmuls), in rotated rounds. Targets (issue
13): ``cuda_events`` at most +1% on the launch-bound loop and +0.3% on the GPU-bound one.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import torch

import trial_instrumentation as ti
from benchmarks.cpu import spin
from benchmarks.gpu_check import figure
from trial_instrumentation import torch_timing
from trial_instrumentation.timing import Histogram, Phase

# cuda_events' slowdown against the bare loop: launch-bound, GPU-bound (gpu_loops' order).
TARGETS = (0.01, 0.003)
PHASES = (ti.TO_DEVICE, ti.TRAIN_BATCH, ti.STEP_LR_SCHEDULERS, ti.FROM_DEVICE, ti.REDUCE_METRICS)


class StandInEvent:
    """A CUDA event the GPU has always completed; recording it costs nothing."""

    def record(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: StandInEvent) -> float:
        return 1.0


class StandInResolver(torch_timing.EventResolver):
    def __init__(self, poll_seconds: float = torch_timing.POLL_SECONDS,
                 inline: bool = True) -> None:
        super().__init__(poll_seconds, record=by_event, inline=inline)

    def event(self) -> Any:
        try:
            return self._free.pop()
        except IndexError:
            return StandInEvent()


def by_event(event: Any) -> None:
    """Record through the event's own ``record()``: torch's ``Event.record()`` on a GPU, the
    stand-in's no-op here."""
    event.record()


def rotated(loops: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each loop in each of ``rounds`` rounds, the order rotated every round."""
    names = list(loops)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            started = time.perf_counter()
            loops[name]()
            times[name].append(time.perf_counter() - started)
    return times


def slowdowns(times: dict[str, list[float]], reference: str = "bare") -> dict[str, float]:
    """Median over rounds of each loop's time / the reference's in the same round, less 1:
    load that hits a round hits both sides, and a round it hit on one side is outvoted."""
    return {name: statistics.median(a / b for a, b in zip(t, times[reference])) - 1
            for name, t in times.items() if name != reference}


def hot_path_rounds(number: int = 2_000, repeat: int = 9) -> dict[str, list[float]]:
    """ns per enter + exit in each of ``repeat`` rounds: a wall phase, and cuda_events phases
    on stand-in events, back to back (sharing boundary events) and apart (each its own). The
    cases run interleaved, so round ``i`` of every case saw the same load. The resolver runs
    between rounds, on this thread: its thread polling inside a round took the GIL there, and
    on a loaded machine each handoff waited for the scheduler (``resolver_toll`` prices it)."""
    resolver = StandInResolver(poll_seconds=3600.0)
    try:
        wall = Phase("w", Histogram(ti.DEFAULT_BUCKETS))
        a, b = (torch_timing.EventPhase(n, Histogram(ti.DEFAULT_BUCKETS), resolver)
                for n in "ab")
        cases = {"wall phase": ("with wall: pass", 1),
                 "cuda_events, adjacent phases (shared events)": ("with a: pass\nwith b: pass", 2),
                 # A close too old to share: the apart case, plus one attribute store.
                 "cuda_events, phases apart (own events)":
                     ("with a: pass\nr.last_end_at = -1.0", 1)}
        scope = {"wall": wall, "a": a, "b": b, "r": resolver}
        timers = {name: (timeit.Timer(stmt, globals=scope), per)
                  for name, (stmt, per) in cases.items()}
        rounds: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeat):
            for name, (timer, per) in timers.items():  # short rounds, the queue resolved after
                rounds[name].append(timer.timeit(number) / number / per * 1e9)
                resolver.resolve()
        return rounds
    finally:
        resolver.stop()


def hot_path_ns(number: int = 2_000, repeat: int = 9) -> dict[str, float]:
    """The best round of each case of ``hot_path_rounds``."""
    return {name: min(ns) for name, ns in hot_path_rounds(number, repeat).items()}


def resolver_toll(rounds: int, steps: int) -> dict[str, float]:
    """Slowdown of a GIL-bound 2 ms step with five phases, per timing, against no timing."""
    def loop(phases: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(steps):
                for phase in phases:
                    with phase:
                        if phase is phases[1]:
                            spin(0.002)
        return run

    def bare() -> None:
        for _ in range(steps):
            spin(0.002)

    poll = f"{torch_timing.POLL_SECONDS * 1e3:.0f} ms"
    resolvers = {"cuda_events, resolver thread every 2 ms": StandInResolver(0.002, False),
                 f"cuda_events, resolver thread every {poll}": StandInResolver(inline=False),
                 "cuda_events, resolved inline (now)": StandInResolver()}
    loops: dict[str, Callable[[], None]] = {"bare": bare, "wall": loop(
        [Phase(n, Histogram(ti.DEFAULT_BUCKETS)) for n in PHASES])}
    for name, resolver in resolvers.items():
        loops[name] = loop([torch_timing.EventPhase(n, Histogram(ti.DEFAULT_BUCKETS), resolver)
                            for n in PHASES])
    try:
        return slowdowns(rotated(loops, rounds))
    finally:
        for resolver in resolvers.values():
            resolver.stop()


def launch_bound() -> Callable[[], Any]:
    """A small MLP's training step: many tiny kernels, bound by their launches."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
    x = torch.randn(64, 256, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def work() -> Any:
        optimizer.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss
    return work


def gpu_bound() -> Callable[[], Any]:
    """Three 4096x4096 matmuls: a few long kernels, bound by the GPU."""
    torch.manual_seed(0)
    m = torch.randn(4096, 4096, device="cuda") / 64

    def work() -> Any:
        y = m
        for _ in range(3):
            y = (y @ m) / 64
        return y.sum()
    return work


def gpu_loop(work: Callable[[], Any], trial: ti.Trial | None, steps: int) -> Callable[[], None]:
    """``steps`` steps of ``work`` with the five phases of a real loop (none when ``trial`` is
    None); no host sync inside, one at the end so the round's time covers the GPU's work."""
    def run() -> None:
        total = torch.zeros((), device="cuda")
        for _ in range(steps):
            if trial is None:
                total += work().detach()
                continue
            with trial.phase(ti.TO_DEVICE):
                pass
            with trial.phase(ti.TRAIN_BATCH):
                out = work()
            with trial.phase(ti.STEP_LR_SCHEDULERS):
                pass
            with trial.phase(ti.FROM_DEVICE):
                value = out.detach()
            with trial.phase(ti.REDUCE_METRICS):
                total += value
        torch.cuda.synchronize()
    return run


# cuda_events recording through torch's Event.record() (a Stream made per call), beside the
# mode as shipped (torch_timing.recorder), in the same rounds.
TORCH_RECORD = f"{ti.CUDA_EVENTS} via Event.record()"
# cuda_events resolved by a thread waking every POLL_SECONDS (before: its query() and
# elapsed_time() calls took the GIL back from the training thread), and resolved once, at
# the round's end (what the pairs cost with no resolution during the steps).
THREAD = f"{ti.CUDA_EVENTS}, resolver thread"
PAUSED = f"{ti.CUDA_EVENTS}, resolved after"
VARIANTS = (TORCH_RECORD, THREAD, PAUSED)


def record_ns(number: int = 20_000, repeat: int = 7) -> dict[str, float]:
    """ns per event record on the current stream, best of ``repeat`` rounds: torch's
    ``Event.record()`` and trainwatch's recorder, interleaved, the queue drained between."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    cases = {"Event.record()": by_event, "trainwatch recorder": torch_timing.recorder()}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeat):
        for name, record in cases.items():
            started = time.perf_counter()
            for i in range(number):
                record(events[i & 1])
            best[name] = min(best[name], (time.perf_counter() - started) / number * 1e9)
            torch.cuda.synchronize()
    return best


def resolved_after(run: Callable[[], None], resolver: Any) -> Callable[[], None]:
    """``run``, then every pair it left resolved, on this thread (timed with the round)."""
    def both() -> None:
        run()
        resolver.resolve_safely()
    return both


LOOPS = {"launch": ("launch-bound (small MLP)", launch_bound),
         "gpu": ("GPU-bound (4096^2 matmuls)", gpu_bound)}


def gpu_loops(rounds: int, steps: int, kinds: tuple[str, ...] = tuple(LOOPS),
              variants: tuple[str, ...] = VARIANTS) -> dict[str, dict[str, float]]:
    """Per loop kind, the slowdown of each timing mode against the bare loop (and of
    cuda_events recording through torch's ``Event.record()``). ``kinds``: some of LOOPS;
    ``variants``: some of VARIANTS (fewer loops a round: more rounds in the same time)."""
    results = {}
    for kind, make in (LOOPS[name] for name in kinds):
        work = make()
        trials = {mode: ti.Trial(experiment="bench", trial=mode, pull_port=0, timing_mode=mode)
                  for mode in ti.TIMING_MODES}
        for variant in variants:
            trials[variant] = ti.Trial(experiment="bench", trial=variant, pull_port=0,
                                       timing_mode=ti.CUDA_EVENTS)
        loops = {"bare": gpu_loop(work, None, steps),
                 **{mode: gpu_loop(work, t, steps) for mode, t in trials.items()}}
        for run in loops.values():
            run()  # warm-up: cuBLAS, the allocator, the phases
        # The trials' resolvers are made by the warm-up's first phase.
        if TORCH_RECORD in trials:
            trials[TORCH_RECORD]._resolver.record = by_event
        for variant in (THREAD, PAUSED):
            if variant in trials:
                trials[variant]._resolver.inline = False
        if THREAD in trials:
            trials[THREAD]._resolver._thread.start()
        if PAUSED in trials:
            loops[PAUSED] = resolved_after(loops[PAUSED], trials[PAUSED]._resolver)
        times = rotated(loops, rounds)
        for t in trials.values():
            t.close()
        results[kind] = slowdowns(times)
        results[kind]["bare step ms"] = statistics.median(times["bare"]) / steps * 1e3
    return results


def report(rounds: int = 7, steps: int = 200, loops: tuple[str, ...] = tuple(LOOPS),
           variants: tuple[str, ...] = VARIANTS) -> None:
    print("\ncuda_events, CPU side (stand-in events; runs without a GPU)")
    for name, ns in hot_path_ns().items():
        print(f"  {name:<46} {ns:7.0f} ns per enter + exit")
    for name, slowdown in resolver_toll(max(rounds, 41), 20).items():
        print(f"  GIL-bound 2 ms step, five phases, {name:<44} {slowdown:+.2%}")
    if not torch.cuda.is_available():
        print("cuda_events on a GPU: skipped (no CUDA)")
        figure("cuda_events on a GPU", "skipped (no CUDA)", "launch-bound <= +1%", None)
        return
    print(f"cuda_events on {torch.cuda.get_device_name()}: {rounds} rotated rounds of {steps} "
          "steps (targets: launch-bound <= +1%, GPU-bound <= +0.3%)")
    for name, ns in record_ns().items():
        print(f"  one event recorded on the current stream, {name:<20} {ns:7.0f} ns")
    targets = dict(zip(LOOPS, TARGETS, strict=True))
    for (kind, row), target in zip(gpu_loops(rounds, steps, loops, variants).items(),
                                   (targets[name] for name in loops), strict=True):
        modes = ", ".join(f"{mode} {row[mode]:+.2%}" for mode in (*ti.TIMING_MODES, *variants))
        print(f"  {kind}: bare {row['bare step ms']:.2f} ms/step; {modes}")
        figure(f"cuda_events slowdown, {kind}", f"{row['cuda_events']:+.2%}",
               f"<= +{target:.1%}", row["cuda_events"] <= target)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--loops", nargs="+", choices=list(LOOPS), default=list(LOOPS),
                        help="which loops (default both)")
    parser.add_argument("--no-variants", action="store_true",
                        help="the shipped modes against the bare loop only: more rounds in "
                             "the same time, for the launch-bound loop's few-percent noise")
    cli = parser.parse_args()
    report(cli.rounds, cli.steps, tuple(cli.loops), () if cli.no_variants else VARIANTS)
