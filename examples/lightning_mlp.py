"""PyTorch Lightning on ring: a ~10 M-parameter MLP on synthetic data.

The one line that makes ``Trainer(strategy="ring")`` available is
``import ring_strategy``. Started as a plain script, the first process starts
the other ``--devices - 1`` workers itself::

    python examples/lightning_mlp.py --devices 2

Under the launcher the launcher's workers are used::

    ringrun -np 2 python examples/lightning_mlp.py --devices 2

``--strategy ddp`` runs the same training with Lightning's DDP (gloo) for
comparison. Rank 0 prints the throughput of the timed steps in samples/s and
checks that every worker ends with the same weights.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import ring_strategy  # noqa: F401  (registers Trainer(strategy="ring"))
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class MLP(pl.LightningModule):
    """1024 -> hidden -> hidden -> 10 with ReLUs; about 10.5 M parameters at hidden=2048."""

    def __init__(self, in_features: int = 1024, hidden: int = 2048, classes: int = 10, lr: float = 0.01) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes),
        )
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, sync_dist=True, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr * self.trainer.world_size, momentum=0.9)


class Throughput(pl.Callback):
    """Times the training steps after ``warmup`` and reports samples/s over all workers."""

    def __init__(self, batch_size: int, warmup: int) -> None:
        self.batch_size = batch_size
        self.warmup = warmup
        self.start = 0.0
        self.steps = 0
        self.rate = float("nan")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx >= self.warmup:
            self.steps = batch_idx - self.warmup + 1

    def on_train_epoch_end(self, trainer, pl_module):
        elapsed = time.perf_counter() - self.start
        if self.steps:
            self.rate = self.steps * self.batch_size * trainer.world_size / elapsed


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["ring", "ddp"], default="ring")
    parser.add_argument("--devices", type=int, default=2, help="worker processes on this host")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--num-batches", type=int, default=30, help="steps per worker")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps at the start")
    parser.add_argument("--hidden", type=int, default=2048, help="width of the hidden layers")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.warmup >= args.num_batches:
        raise SystemExit(f"--warmup should be less than --num-batches. Got: {args.warmup} >= {args.num_batches}")
    pl.seed_everything(args.seed, verbose=False)
    model = MLP(hidden=args.hidden)
    samples = args.batch_size * args.num_batches * args.devices
    g = torch.Generator().manual_seed(args.seed)
    data = TensorDataset(torch.randn(samples, 1024, generator=g), torch.randint(0, 10, (samples,), generator=g))
    throughput = Throughput(args.batch_size, args.warmup)
    trainer = pl.Trainer(
        strategy=args.strategy, accelerator="cpu", devices=args.devices, max_epochs=1,
        callbacks=[throughput], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=args.batch_size, drop_last=True))

    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).digest()
    mine = torch.tensor([int.from_bytes(digest[:7], "little")], dtype=torch.int64)
    same = len(set(trainer.strategy.all_gather(mine).flatten().tolist())) == 1
    if trainer.is_global_zero:
        params = sum(p.numel() for p in model.parameters())
        print(f"strategy {args.strategy}, {params / 1e6:.1f} M parameters, batch size {args.batch_size} per worker, "
              f"{trainer.world_size} worker(s), {torch.get_num_threads()} thread(s) each", flush=True)
        print(f"loss {trainer.callback_metrics['loss'].item():.4f}", flush=True)
        print(f"total samples/s on {trainer.world_size} worker(s): {throughput.rate:.1f}", flush=True)
        print(f"parameters identical on all {trainer.world_size} workers: {same}", flush=True)


if __name__ == "__main__":
    main()
