"""The Lightning training of lightning_ddp_before.py on ring: python lightning_ddp_after.py
(the script starts its second worker), or ringrun -np 2 python lightning_ddp_after.py.
docs/migrate-lightning.md. An argument sets the number of devices (default 2)."""

import sys

import lightning.pytorch as pl
import torch

import ring_strategy  # noqa: F401  (registers strategy="ring")
from torch.utils.data import DataLoader, TensorDataset


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.linear(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    X = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    y = X @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
    data = DataLoader(TensorDataset(X, y), batch_size=64)  # one batch of each worker's shard a step
    model = Regression()
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=int(sys.argv[1]) if len(sys.argv) > 1 else 2,
                         max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, data)
    if trainer.global_rank == 0:
        w = model.linear.weight
        print("weights", " ".join(f"{v:.5f}" for v in w.flatten().tolist()), f"{model.linear.bias.item():.5f}")
