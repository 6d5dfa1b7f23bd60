"""An unmodified Lightning script (CPU; one process, or ``DEVICES`` ranks of Lightning's own DDP
launcher, gloo): nothing of trainwatch in it. ``python lightning_loop.py STEPS [DEVICES]``."""

from __future__ import annotations

import os
import sys

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    devices = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * 8 * devices, 16),
                         torch.randint(0, 4, (steps * 8 * devices,)))
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=devices, logger=False,
                         strategy="ddp" if devices > 1 else "auto",
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Model(), DataLoader(data, batch_size=8))
    # One write(2) per line: the ranks share stdout, and print's separate writes of the text and
    # its newline interleave with the other rank's ("...steps 10rank 1 ...").
    os.write(1, f"rank {trainer.global_rank} optimizer steps {trainer.global_step}\n".encode())


if __name__ == "__main__":
    main()
