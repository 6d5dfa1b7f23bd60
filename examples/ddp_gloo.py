"""The pytorch_loop example under DistributedDataParallel: CPU ranks over gloo.

    .venv/bin/torchrun --nproc-per-node 2 examples/ddp_gloo.py --steps 50 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial ddp

Each rank pushes its own group (grouping key experiment/trial/rank, rank from torchrun's
RANK); ``reduce_metrics`` times the all-reduce of the loss across ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.distributed as dist
from pytorch_loop import SlowDataset, make_loader, make_trial, parse_args, train
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

log = logging.getLogger("ddp_gloo")


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv, __doc__)
    if args.max_seconds is not None:  # ranks would stop at different steps and hang
        raise SystemExit("ddp_gloo.py: --max-seconds is not supported under DDP; use --steps")
    trial = make_trial(args)  # rank and world size from torchrun's RANK / WORLD_SIZE
    dist.init_process_group("gloo")
    try:
        world = dist.get_world_size()
        dataset = SlowDataset(args.steps * args.batch_size * world, args.loader_delay)
        sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=False)
        with trial:
            loss = train(trial, make_loader(args, dataset, sampler), torch.device("cpu"),
                         reduce=all_reduce, wrap=DistributedDataParallel)
        log.info("rank %d/%d trained %d steps, mean loss over ranks %.4f",
                 dist.get_rank(), world, args.steps, loss)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
