"""Measure a pipeline's two ceilings, then train: the seed lecture's mock-component method.

    .venv/bin/python examples/limits.py --loader-delay 0.02 --limit-seconds 5 --workers 0 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial limits

First the loader alone (every batch discarded), then the step alone (one batch, on the device,
trained on again and again), each for ``--limit-seconds``; both rates are logged and pushed
(``trainwatch_trial_{loader,step}_limit_samples_per_second``), where ``trainwatch diagnose``
compares them. Then it trains as examples/pytorch_loop.py does (same flags).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import torch
from pytorch_loop import CLASSES, FEATURES, SlowDataset, make_loader, make_trial, parse_args, train
from torch import nn

log = logging.getLogger("limits")
Batch = tuple[torch.Tensor, torch.Tensor]


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--limit-seconds", type=float, default=5.0,
                     help="seconds each limit is measured for")
    limits, rest = own.parse_known_args(argv)
    args = parse_args(rest, __doc__)
    trial = make_trial(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = SlowDataset(args.steps * args.batch_size, args.loader_delay)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(batch: Batch) -> None:  # the training step, without its loader
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()

    with trial:
        loader_rate = trial.measure_loader_limit(make_loader(args, dataset), limits.limit_seconds)
        x, y = next(iter(make_loader(args, dataset)))
        step_rate = trial.measure_step_limit(step, (x.to(device), y.to(device)),
                                             limits.limit_seconds)
        slower = "loader" if loader_rate < step_rate else "step"
        log.info("loader %.0f samples/s, step %.0f samples/s: the %s is the limit (%.1fx)",
                 loader_rate, step_rate, slower,
                 max(loader_rate, step_rate) / min(loader_rate, step_rate))
        loss = train(trial, make_loader(args, dataset), device)
    log.info("trained, mean loss %.4f", loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
