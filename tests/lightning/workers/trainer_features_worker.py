"""Trainer(strategy="ring", sync_batchnorm=True) on two self-launched workers.

    python sync_bn_worker.py --out DIR       # rank 0 starts rank 1

Each rank fits a small conv net with BatchNorm2d and BatchNorm1d layers on
its half of every global batch (rank r takes samples r, r+2, ...) and writes
DIR/rank<R>.json: the layers' running statistics and the parameters after
the fit, the classes of the batch-norm layers during and after it, and, on
rank 0, the same figures from plain torch (no Lightning, no ring) trained on
the whole global batch in one process, and from rank 0's half alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List

import ring_strategy  # noqa: F401  (registers strategy="ring")
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, BATCH, EPOCHS, LR = 32, 4, 2, 0.1  # BATCH per worker


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(7)
    # Rank-dependent scale and shift: each half alone has other statistics.
    x = torch.randn(SAMPLES, 2, 5, 5, generator=g) * torch.linspace(0.5, 3.0, SAMPLES).view(-1, 1, 1, 1)
    x = x + torch.arange(SAMPLES).remainder(2).view(-1, 1, 1, 1) * 2.0
    y = torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def network() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(27, 6), torch.nn.BatchNorm1d(6), torch.nn.Tanh(), torch.nn.Linear(6, 1),
    )


def figures(net: torch.nn.Module) -> Dict[str, List[float]]:
    """The batch-norm buffers and every parameter, flattened."""
    out = {name: buf.double().flatten().tolist() for name, buf in net.named_buffers()}
    out["parameters"] = torch.cat([p.detach().flatten() for p in net.parameters()]).double().tolist()
    return out


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = network()
        self.seen: List[str] = []

    def train_dataloader(self) -> DataLoader:
        data = dataset()
        sampler = DistributedSampler(data, num_replicas=self.trainer.world_size, rank=self.global_rank, shuffle=False)
        return DataLoader(data, batch_size=BATCH, sampler=sampler)

    def training_step(self, batch, batch_idx):
        self.seen = sorted({type(m).__name__ for m in self.net if "Norm" in type(m).__name__})
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


def plain_torch(samples: slice) -> Dict[str, List[float]]:
    """One process, torch.nn.BatchNorm: each step takes ``samples`` of the step's global batch."""
    net, (x, y) = network(), dataset().tensors
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for _ in range(EPOCHS):
        for start in range(0, SAMPLES, 2 * BATCH):
            xb, yb = x[start:start + 2 * BATCH][samples], y[start:start + 2 * BATCH][samples]
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(xb), yb).backward()
            opt.step()
    return figures(net)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2, sync_batchnorm=True, max_epochs=EPOCHS,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    model = Net()
    trainer.fit(model)
    result = {
        "ranks": trainer.world_size,
        "during_fit": model.seen,
        "after_fit": sorted({type(m).__name__ for m in model.net if "Norm" in type(m).__name__}),
        "layer_sync": type(trainer.strategy._layer_sync).__name__,
        "ring": figures(model.net),
    }
    if trainer.global_rank == 0:
        result["global_batch"] = plain_torch(slice(None))
        result["half_batch"] = plain_torch(slice(0, None, 2))
    (args.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
