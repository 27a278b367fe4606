"""Self-launched with devices=2; rank 1 raises in its fourth training step.
Rank 0 must fail too (its next collective ends), not wait forever."""

from __future__ import annotations

import ring_strategy  # noqa: F401  (registers strategy="ring")
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Failing(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 3:
            raise ValueError("rank 1 fails on purpose")
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Failing(), DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4))
