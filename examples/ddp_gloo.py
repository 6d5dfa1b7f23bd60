"""The pytorch_loop example under DistributedDataParallel: CPU ranks over gloo.

    .venv/bin/torchrun --nproc-per-node 2 examples/ddp_gloo.py --steps 50 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial ddp

Under Slurm, ``srun -n 2`` starts the ranks instead (MASTER_ADDR and MASTER_PORT exported by
the job script; docs/slurm.md). Each rank pushes its own group (grouping key
experiment/trial/rank, rank from torchrun's RANK, else Slurm's SLURM_PROCID);
``reduce_metrics`` times the all-reduce of the loss across ranks, ``wait_for_ranks`` a barrier
before each step (the time a rank waits for slower ranks, which
TrainwatchRankStraggler subtracts). ``--straggler-rank 1 --straggler-delay 0.1`` makes rank 1
sleep 0.1 s more per batch in its Dataset (a slow node or data shard): a straggler.
``--step-limit-seconds 2`` first measures each rank's single-rank step limit (an unwrapped
copy of the model, no collectives; pushed as trainwatch_trial_step_limit_samples_per_second),
from which Prometheus records the trial's scaling efficiency.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from pytorch_loop import CLASSES, FEATURES, SlowDataset, make_loader, make_trial, parse_args, train
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

log = logging.getLogger("ddp_gloo")
Batch = tuple[torch.Tensor, torch.Tensor]


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def straggler_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--straggler-rank", type=int, help="the rank that is slower")
    parser.add_argument("--straggler-delay", type=float, default=0.0,
                        help="extra seconds that rank sleeps per batch in its Dataset")
    parser.add_argument("--step-limit-seconds", type=float,
                        help="measure the single-rank step limit for this long first")


def single_rank_step() -> Callable[[Batch], None]:
    """The training step on one rank alone: the model unwrapped, so no all-reduce."""
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()

    return step


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv, __doc__, extend=straggler_options)
    if args.straggler_delay < 0:
        raise SystemExit("ddp_gloo.py: --straggler-delay must be >= 0")
    if args.max_seconds is not None:  # ranks would stop at different steps and hang
        raise SystemExit("ddp_gloo.py: --max-seconds is not supported under DDP; use --steps")
    trial = make_trial(args)  # rank and world size: torchrun's RANK / WORLD_SIZE, else Slurm's
    # The rendezvous is at MASTER_ADDR:MASTER_PORT (torchrun sets them; under srun, the job
    # script does: docs/slurm.md); the ranks are the trial's, so `srun -n 2` needs no torchrun.
    dist.init_process_group("gloo", rank=trial.config.rank, world_size=trial.config.world_size)
    try:
        world = dist.get_world_size()
        slower = args.straggler_delay if dist.get_rank() == args.straggler_rank else 0.0
        dataset = SlowDataset(args.steps * args.batch_size * world, args.loader_delay + slower)
        sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=False)
        with trial:
            if args.step_limit_seconds:
                trial.measure_step_limit(single_rank_step(), dataset[list(range(args.batch_size))],
                                         args.step_limit_seconds)
            loss = train(trial, make_loader(args, dataset, sampler), torch.device("cpu"),
                         reduce=all_reduce, wrap=DistributedDataParallel,
                         wait_for_ranks=dist.barrier)
        log.info("rank %d/%d trained %d steps, mean loss over ranks %.4f",
                 dist.get_rank(), world, args.steps, loss)
        # Every rank done before any tears its connections down: a rank whose peer left first
        # could abort in gloo's teardown ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
