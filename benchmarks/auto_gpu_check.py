"""One GPU check of automatic instrumentation (issue 39): an unmodified CUDA training loop run
with ``TRAINWATCH_AUTO=1`` (pull mode, port 0), its trial's registry read before exit: steps,
samples, the phases, and the GPU it noted (``trainwatch_trial_gpu_info{uuid}``).

    TRAINWATCH_AUTO=1 TRAINWATCH_PULL_PORT=0 TRAINWATCH_EXPERIMENT=gpu TRAINWATCH_TRIAL=auto \\
        PYTHONPATH=trial_instrumentation/auto/site:. python -m benchmarks.auto_gpu_check
"""

from __future__ import annotations

import sys

import torch
from prometheus_client import generate_latest
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.gpu_check import figure
from trial_instrumentation import auto


def loop(steps: int = 50) -> int:
    """What an unmodified script does: no trainwatch in it."""
    device = torch.device("cuda")
    data = TensorDataset(torch.randn(steps * 64, 512), torch.randint(0, 10, (steps * 64,)))
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    done = 0
    for x, y in DataLoader(data, batch_size=64, pin_memory=True, num_workers=2):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        done += 1
    torch.cuda.synchronize()
    return done


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA: nothing checked")
        figure("automatic instrumentation on a GPU", "skipped (no CUDA)", "every step", None)
        return 0
    steps = loop()
    trial = auto.AUTO.trial
    if trial is None:
        print("FAIL: automatic instrumentation made no trial (TRAINWATCH_AUTO=1 and "
              "trial_instrumentation/auto/site on PYTHONPATH?)")
        figure("automatic instrumentation: a trial", "none", "one", False)
        return 1
    text = generate_latest(trial.registry).decode()
    wanted = [line for line in text.splitlines() if line.startswith((
        "trainwatch_trial_steps_total", "trainwatch_trial_samples_total",
        "trainwatch_trial_gpu_info", "trainwatch_trial_phase_seconds_count"))]
    print(f"script's optimizer steps {steps}; {torch.cuda.get_device_name()}")
    print("\n".join(wanted))
    counted = next((line.rsplit(" ", 1)[1] for line in wanted
                    if line.startswith("trainwatch_trial_steps_total")), "none")
    gpu = any("gpu_info" in line for line in wanted)
    ok = counted == f"{steps}.0" and gpu
    print("AUTO_GPU_CHECK", "ok" if ok else "FAIL")
    figure("automatic instrumentation: steps counted", f"{counted} of {steps}", "every step",
           counted == f"{steps}.0")
    figure("automatic instrumentation: the GPU noted", "yes" if gpu else "no", "yes", gpu)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
