"""Under ringrun -np 2: first a fit with devices=1 (one device per process,
Horovod's convention), then Trainers that disagree (max_epochs differs),
which must give every rank a clear error from fit, not a hang."""

from __future__ import annotations

import os

import ring_strategy  # noqa: F401  (registers strategy="ring")
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    rank = int(os.environ["RING_RANK"])
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    model = Tiny()
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=1, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, data)
    weights = trainer.strategy.all_gather(torch.cat([p.detach().flatten() for p in model.parameters()]))
    print(f"rank {rank}: devices=1 world={trainer.world_size} steps={trainer.global_step} "
          f"same={bool((weights[0] == weights[1]).all())}", flush=True)

    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2, max_epochs=1 + rank, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    try:
        trainer.fit(Tiny(), data)
    except RuntimeError as e:
        print(f"rank {rank}: error: {e}", flush=True)
    else:
        print(f"rank {rank}: no error", flush=True)


if __name__ == "__main__":
    main()
