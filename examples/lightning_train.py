"""PyTorch Lightning timed by trainwatch: one callback, the LightningModule unchanged.

    .venv/bin/python examples/lightning_train.py --steps 40 --loader-delay 0.02 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial lightning
    .venv/bin/python examples/lightning_train.py --devices 2 ...   # DDP, 2 CPU ranks over gloo

Needs ``pip install 'trainwatch[lightning]'``. ``--steps`` is per epoch; every rank pushes
its own group (rank from Lightning). Trial settings left off the command line come from
TRAINWATCH_*. Exits 0 after the final push; the group stays for `trainwatch gc`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from trial_instrumentation.lightning import TrainwatchCallback

log = logging.getLogger("lightning_train")
FEATURES, CLASSES = 32, 10
Batch = tuple[torch.Tensor, torch.Tensor]


def slow_collate(samples: list[Batch], delay: float) -> Batch:
    """Collates a batch after sleeping ``delay``: a loader that costs ``delay`` per batch."""
    time.sleep(delay)
    return default_collate(samples)  # type: ignore[no-any-return]


def make_loader(args: argparse.Namespace) -> DataLoader[Batch]:
    """Random classification data; under DDP, Lightning adds a DistributedSampler, so each
    rank gets ``--steps`` batches."""
    generator = torch.Generator().manual_seed(0)
    samples = args.steps * args.batch_size * args.devices
    dataset = TensorDataset(torch.randn(samples, FEATURES, generator=generator),
                            torch.randint(0, CLASSES, (samples,), generator=generator))
    return DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                      collate_fn=functools.partial(slow_collate, delay=args.loader_delay))


class Classifier(pl.LightningModule):
    """A plain LightningModule: nothing in it knows about trainwatch."""

    def __init__(self, step_cpu: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
        self.step_cpu = step_cpu  # CPU seconds burned per step: a CPU-bound step (--step-cpu)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        burned = time.process_time() + self.step_cpu
        while time.process_time() < burned:
            pass
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="batches per epoch and rank")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-seconds", type=float,
                        help="train epochs until this many seconds have passed (Lightning's "
                        "max_time; the ranks stop together and exit cleanly; default: --epochs)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--loader-delay", type=float, default=0.0,
                        help="seconds slept per batch in the Dataset (a slow loader)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--step-cpu", type=float, default=0.0,
                        help="CPU seconds burned per training step (a CPU-bound step)")
    parser.add_argument("--devices", type=int, default=1, help="CPU ranks (2+: DDP over gloo)")
    parser.add_argument("--experiment", help="default: $TRAINWATCH_EXPERIMENT")
    parser.add_argument("--trial", help="default: $TRAINWATCH_TRIAL")
    parser.add_argument("--pushgateway", help="default: $TRAINWATCH_PUSHGATEWAY (unset: no-op)")
    parser.add_argument("--push-interval", help="10, 10s, 1m; default 10 (seconds)")
    parser.add_argument("--measure-limits", type=float, metavar="SECONDS",
                        help="measure the loader's and the step's limits for this long each "
                        "when training starts (default: not)")
    args = parser.parse_args(argv)
    if min(args.steps, args.epochs, args.batch_size, args.devices) < 1 or args.loader_delay < 0:
        parser.error("--steps, --epochs, --batch-size, --devices must be >= 1, --loader-delay >= 0")
    if args.max_seconds is not None and args.max_seconds <= 0:
        parser.error("--max-seconds must be > 0")
    if args.step_cpu < 0:
        parser.error("--step-cpu must be >= 0")
    return args


def make_trainer(args: argparse.Namespace, *callbacks: pl.Callback) -> pl.Trainer:
    trainwatch = TrainwatchCallback(experiment=args.experiment, trial=args.trial,
                                    pushgateway=args.pushgateway,
                                    push_interval=args.push_interval,
                                    measure_limits=args.measure_limits)
    timed = args.max_seconds is not None  # epochs until the time is up (-1: no epoch limit)
    return pl.Trainer(accelerator="cpu", devices=args.devices,
                      max_epochs=-1 if timed else args.epochs,
                      max_time={"seconds": args.max_seconds} if timed else None,
                      strategy="ddp" if args.devices > 1 else "auto",
                      callbacks=[trainwatch, *callbacks], logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    trainer = make_trainer(args)  # bad trainwatch settings fail here, before any data
    trainer.fit(Classifier(args.step_cpu), make_loader(args))
    log.info("trained %d steps per rank", trainer.global_step)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
