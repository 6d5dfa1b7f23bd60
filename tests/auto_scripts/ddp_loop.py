"""An unmodified two-rank DDP (gloo, CPU) loop for `torchrun --standalone --nproc-per-node 2`:
nothing of trainwatch in it. Each rank prints its optimizer steps."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * world * 8, 16), torch.randint(0, 4, (steps * world * 8,)))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    model = DistributedDataParallel(nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepped = 0
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        stepped += 1
    os.write(1, f"rank {dist.get_rank()} optimizer steps {stepped}\n".encode())  # one write: ranks share stdout
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
