"""What an on-demand profiler trace says of a launch-bound and a GPU-bound loop (issue 27): the
summary `trainwatch diagnose` prints, from the gauges the trial pushes.

    .venv/bin/python -m benchmarks.profile_summary [--steps 5]

With CUDA: benchmarks.cuda_events' launch-bound loop (an 8-layer 256-wide MLP, batch 64: many
short kernels) and GPU-bound loop (three 4096² matmuls: a few long ones); the first should read
"launch-bound" (kernels averaging under 20 µs, hundreds per step) with the GPU mostly idle, the
second not, with the GPU mostly computing. Without CUDA, the CPU MLP only (operator shares and
the CPU-time split, no kernel figures).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch

import trial_instrumentation as ti
from benchmarks.gpu_check import figure
from trainwatch.diagnose import traces
from trial_instrumentation import names
from trial_instrumentation.profiling import WARMUP_STEPS


def summary(work: Callable[[], Any], steps: int, folder: str) -> traces.TraceSummary:
    """Run ``work`` as a trial's steps, ask for a trace of ``steps`` of them, read its gauges."""
    os.environ[names.ENV_PROFILE_DIR] = folder
    trial = ti.Trial(experiment="bench", trial="profile", pull_port=0)
    trial.profile(steps)
    for _ in trial.loader(range(1 + WARMUP_STEPS + steps), samples=1):
        work()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    trial.close()
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in trial.registry.collect():
        for sample in family.samples:
            rows.setdefault(sample.name, []).append((sample.labels, sample.value))
    key = ("bench", "profile", "0")
    (found,) = traces.gather(lambda expr: {key: rows.get(expr.split("{")[0], [])}).values()
    return found


def cpu_mlp() -> Callable[[], Any]:
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    x = torch.randn(64, 256)
    return lambda: model(x).square().mean().backward()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    if torch.cuda.is_available():
        from benchmarks.cuda_events import gpu_bound, launch_bound
        loops = {"launch-bound (small MLP)": launch_bound(), "GPU-bound (4096² matmuls)":
                 gpu_bound()}
    else:
        loops = {"CPU (small MLP; no CUDA here)": cpu_mlp()}
    with tempfile.TemporaryDirectory() as folder:
        for kind, work in loops.items():
            found = summary(work, args.steps, folder)
            line = traces.trace_line('0', found)
            print(f"{kind}:\n  {line}")
            shares = found.split_shares()
            if kind.startswith("launch-bound"):
                figure("trace of the launch-bound loop says launch-bound",
                       "yes" if line.endswith(f": launch-bound ({found.path})") else "no", "yes",
                       line.endswith(f": launch-bound ({found.path})"))
            elif kind.startswith("GPU-bound"):
                compute = shares.get("compute", 0.0)
                figure("GPU-bound loop's trace: compute share of the GPU", compute, "> 0.9",
                       compute > 0.9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
