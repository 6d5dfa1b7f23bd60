"""A plain PyTorch CPU training loop timed with trial_instrumentation (all six timings).

    .venv/bin/python examples/pytorch_loop.py --steps 200 --loader-delay 0.02 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial t1

Trial settings left off the command line come from TRAINWATCH_* (and RANK / WORLD_SIZE).
``--loader-delay`` sleeps once per batch inside the Dataset, in the DataLoader workers, to
show a dataloader-bound trial. ``--max-seconds`` trains epoch after epoch until that much time
has passed (a time budget; `make demo` runs its trials so). Exits 0 after the final push; its
Pushgateway group stays for `trainwatch gc`.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

import trial_instrumentation as ti

FEATURES, CLASSES = 32, 10
T = TypeVar("T")
log = logging.getLogger("pytorch_loop")


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random classification data, fetched a whole batch per ``__getitem__`` (a list of
    indices from a BatchSampler), so ``delay`` (seconds slept) and ``cpu`` (CPU seconds burned,
    as decoding does) are paid once per batch."""

    def __init__(self, samples: int, delay: float, seed: int = 0, cpu: float = 0.0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, FEATURES, generator=generator)
        self.y = torch.randint(0, CLASSES, (samples,), generator=generator)
        self.delay, self.cpu = delay, cpu

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        if self.delay > 0:
            time.sleep(self.delay)
        burn(self.cpu)
        return self.x[indices], self.y[indices]


def burn(seconds: float) -> None:
    """Spends ``seconds`` of this process's CPU time (what decoding or a heavy step costs)."""
    burned = time.process_time() + seconds
    while time.process_time() < burned:
        pass


def parse_args(argv: Sequence[str] | None = None, doc: str | None = __doc__,
               extend: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The shared options; ``extend`` adds a caller's own (ddp_gloo.py's straggler)."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if extend is not None:
        extend(parser)
    parser.add_argument("--steps", type=int, default=100,
                        help="training steps (batches) per epoch")
    parser.add_argument("--max-seconds", type=float,
                        help="train epochs until this many seconds have passed (default: one "
                        "epoch); the exit is a clean one, as at the end of the data")
    parser.add_argument("--loader-delay", type=float, default=0.0,
                        help="seconds slept per batch in the Dataset (a slow loader)")
    parser.add_argument("--loader-cpu", type=float, default=0.0,
                        help="CPU seconds burned per batch in the Dataset (a decoding loader)")
    parser.add_argument("--step-cpu", type=float, default=0.0,
                        help="CPU seconds burned per step in train_batch (a CPU-bound step, as "
                        "a larger model's forward and backward on CPU)")
    parser.add_argument("--cpu-share", type=float, default=1.0,
                        help="at most this share of one core for the whole process: train_batch "
                        "sleeps after its work, as a step that waits for an accelerator (default "
                        "1: computes flat out); make demo sizes it to the machine")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--experiment", help="default: $TRAINWATCH_EXPERIMENT")
    parser.add_argument("--trial", help="default: $TRAINWATCH_TRIAL")
    parser.add_argument("--pushgateway", help="default: $TRAINWATCH_PUSHGATEWAY (unset: no-op)")
    parser.add_argument("--push-interval",
                        help="10, 10s, 1m; default: $TRAINWATCH_PUSH_INTERVAL or 10 (seconds)")
    parser.add_argument("--timing-mode", choices=ti.TIMING_MODES,
                        help="default: $TRAINWATCH_TIMING_MODE or wall")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.workers < 0 or args.loader_delay < 0 \
            or args.step_cpu < 0:
        parser.error("--steps and --batch-size must be >= 1, --workers, --loader-delay and "
                     "--step-cpu >= 0")
    if args.max_seconds is not None and args.max_seconds <= 0:
        parser.error("--max-seconds must be > 0")
    if not 0 < args.cpu_share <= 1:
        parser.error("--cpu-share must be > 0 and at most 1")
    return args


def make_trial(args: argparse.Namespace) -> ti.Trial:
    return ti.Trial(experiment=args.experiment, trial=args.trial, pushgateway=args.pushgateway,
                    push_interval=args.push_interval, timing_mode=args.timing_mode)


def make_loader(args: argparse.Namespace, dataset: SlowDataset,
                sampler: Sampler[int] | None = None) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    batches = BatchSampler(sampler or SequentialSampler(dataset), args.batch_size, drop_last=True)
    # batch_size=None: the Dataset returns whole batches, the BatchSampler says which.
    return DataLoader(dataset, batch_size=None, sampler=batches, num_workers=args.workers)


def epochs_until(loader: Iterable[T], max_seconds: float | None) -> Iterator[T]:
    """One pass over ``loader``, or passes until ``max_seconds`` have gone by (checked between
    batches, so the loop ends as it would at the end of its data)."""
    if max_seconds is None:
        yield from loader
        return
    deadline = time.monotonic() + max_seconds
    while True:
        for batch in loader:
            if time.monotonic() >= deadline:
                return
            yield batch


def train(trial: ti.Trial, loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
          device: torch.device,
          reduce: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
          wrap: Callable[[nn.Module], nn.Module] = lambda m: m,
          wait_for_ranks: Callable[[], object] | None = None, cpu_share: float = 1.0,
          step_cpu: float = 0.0) -> float:
    """The loop, with every standard phase timed; returns the mean loss (after ``reduce``).
    ``wrap`` wraps the model (DistributedDataParallel in ddp_gloo.py); ``wait_for_ranks`` (a
    barrier) runs timed as phase wait_for_ranks before each train_batch, so the time a rank
    waits for slower ones is measured apart from its own work. ``cpu_share`` under 1: the
    process's CPU time since the last step's end is that share of the step's, the rest slept
    at the end of train_batch (as a step that waits for an accelerator). ``step_cpu``: CPU
    seconds burned in each train_batch besides the model's own (a CPU-bound step)."""
    torch.manual_seed(0)
    model = wrap(nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(),
                               nn.Linear(64, CLASSES)).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()
    total, steps = torch.zeros(2), 0
    cpu_mark = time.process_time()
    for x, y in trial.loader(loader):  # times dataloader_next, counts steps and samples
        with trial.phase(ti.TO_DEVICE):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if wait_for_ranks is not None:
            with trial.phase(ti.WAIT_FOR_RANKS):
                wait_for_ranks()
        with trial.phase(ti.TRAIN_BATCH):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            burn(step_cpu)
            if cpu_share < 1:
                time.sleep((time.process_time() - cpu_mark) * (1 / cpu_share - 1))
                cpu_mark = time.process_time()
        with trial.phase(ti.STEP_LR_SCHEDULERS):
            scheduler.step()
        with trial.phase(ti.FROM_DEVICE):
            loss_value = loss.detach().to("cpu")
        with trial.phase(ti.REDUCE_METRICS):
            total += reduce(torch.stack([loss_value * len(y), torch.tensor(float(len(y)))]))
        steps += 1
    return float(total[0] / total[1]) if steps else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    trial = make_trial(args)  # bad settings fail here, before any data is loaded
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = SlowDataset(args.steps * args.batch_size, args.loader_delay, cpu=args.loader_cpu)
    with trial:
        loss = train(trial, epochs_until(make_loader(args, dataset), args.max_seconds), device,
                     cpu_share=args.cpu_share, step_cpu=args.step_cpu)
    budget = f"{args.max_seconds:g} s" if args.max_seconds else f"{args.steps} steps"
    log.info("trained %s on %s, mean loss %.4f", budget, device, loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
