"""An unmodified PyTorch CPU training loop for the automatic-instrumentation tests: nothing of
trainwatch in it (unless --explicit: its instrumented twin). Prints the optimizer steps it ran.

    python plain_loop.py --steps 30 [--accumulate 3] [--loader-delay 0.05] [--seconds 8]
        [--step-cpu 0.005] [--no-optimizer] [--explicit]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES, CLASSES, BATCH = 32, 10, 8


class Batches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random batches; ``delay`` seconds slept per batch (a slow loader)."""

    def __init__(self, count: int, delay: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(count, BATCH, FEATURES, generator=generator)
        self.y = torch.randint(0, CLASSES, (count, BATCH), generator=generator)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per epoch")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--loader-delay", type=float, default=0.0)
    parser.add_argument("--seconds", type=float, help="epochs until this much time passed")
    parser.add_argument("--step-cpu", type=float, default=0.0,
                        help="CPU seconds burned per batch in the step (the model's compute)")
    parser.add_argument("--no-optimizer", action="store_true")
    parser.add_argument("--explicit", action="store_true", help="instrumented with a Trial")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Batches(args.steps * args.accumulate, args.loader_delay),
                        batch_size=None, num_workers=0)
    trial = None
    if args.explicit:
        import trial_instrumentation as ti
        trial = ti.Trial().start()
    deadline = time.monotonic() + (args.seconds or 0)
    stepped = 0
    while True:
        batches = trial.loader(loader) if trial is not None else loader
        for i, (x, y) in enumerate(batches):
            if trial is not None:
                with trial.phase("train_batch"):
                    stepped += train(model, optimizer, x, y, i, args)
            else:
                stepped += train(model, optimizer, x, y, i, args)
        if time.monotonic() >= deadline:
            break
    if trial is not None:
        trial.close()
    print(f"optimizer steps {stepped}", flush=True)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
          i: int, args: argparse.Namespace) -> int:
    burned = time.process_time() + args.step_cpu
    while time.process_time() < burned:
        pass
    loss = nn.functional.cross_entropy(model(x), y) / args.accumulate
    if args.no_optimizer:
        return 0
    loss.backward()
    if (i + 1) % args.accumulate:
        return 0
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return 1


if __name__ == "__main__":
    main()
