"""An elastic Lightning fit for the tests: ``python lightning_elastic_fit.py TAG``
under ``ringrun``'s elastic options, ``Trainer(strategy=RingStrategy(elastic=True,
commit_every_n_steps=COMMIT_EVERY))``.

Least squares (``Linear(DIM, 1)``, SGD with momentum) on SAMPLES fixed
samples, BATCH per rank, the training data unshuffled: every step trains
on one contiguous slice of what the epoch has left, split ``rank::size``,
so :func:`reference` (one process on those global batches, see
:func:`global_batches`) gives the parameters every run must end with.
TAG is unused; tests pass a unique one to find leftover processes.

Settings (environment): ``TRAIN_EPOCHS`` (default 3), ``TRAIN_SLEEP``
(seconds per step, default 0), ``TRAIN_FAIL`` = ``WORKER:STEP`` (that
worker SIGKILLs itself as the batch after ``STEP`` optimizer steps starts;
``WORKER:valEPOCH``: in the validation at the end of epoch EPOCH, which
only then runs, logging with ``sync_dist``),
``TRAIN_STOP`` = ``SIZE:STEPS`` (every rank stops once a world of SIZE
ranks has trained STEPS steps after its start), ``TRAIN_PROGRESS`` (a file
rank 0 rewrites after every step with ``STEP SIZE``), ``TRAIN_PLAIN=1``
(then a second model is fitted the same way with ``RingStrategy()``, not
elastic, and its parameters printed as ``plain params HEX``).

Lines (ringrun prefixes each with ``[worker number]``): ``start worker W pid
P rank R size S step G epoch E at T params HEX`` (when training starts, after
a restart too), ``first step size S at T`` (the first step after it),
``victim worker W pid P failing at T step G``, ``done worker W pid P rank R
size S step G epoch E params HEX``.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from typing import Callable, List

import torch

DIM, SAMPLES, BATCH, LR, MOMENTUM, COMMIT_EVERY = 8, 72, 4, 0.05, 0.9, 2


def data() -> "tuple[torch.Tensor, torch.Tensor]":
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, DIM, generator=g)
    y = x @ torch.randn(DIM, 1, generator=g) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(DIM, 1)


def optimizer(net: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)


def global_batches(epochs: int, size_at: Callable[[int], int]) -> List[List[int]]:
    """The samples of every global step: each epoch's unprocessed samples in
    order, split over ``size_at(step)`` ranks (padded by repeating the start,
    as ``ElasticSampler`` does) and split again whenever that changes."""
    batches: List[List[int]] = []
    for _ in range(epochs):
        processed: set = set()
        while len(processed) < SAMPLES:
            size = size_at(len(batches))
            left = [i for i in range(SAMPLES) if i not in processed]
            per_rank = math.ceil(len(left) / size)
            padded = left + [left[i % len(left)] for i in range(per_rank * size - len(left))]
            for b in range(math.ceil(per_rank / BATCH)):
                chunk = padded[b * BATCH * size:min((b + 1) * BATCH, per_rank) * size]
                batches.append(chunk)
                processed.update(chunk)
                if size_at(len(batches)) != size:
                    break
    return batches


def reference(batches: List[List[int]]) -> torch.Tensor:
    """The parameters after one process trained on ``batches``."""
    x, y = data()
    net = model()
    opt = optimizer(net)
    for rows in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x[rows]), y[rows]).backward()
        opt.step()
    return flat(net)


def flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def main() -> None:
    import ring_strategy  # noqa: F401  (registers strategy="ring")
    import ring_strategy.torch as rt
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from ring_strategy.lightning import RingStrategy

    worker = os.environ.get("RING_ELASTIC_WORKER", os.environ.get("RING_RANK", "0"))  # without elastic: the rank
    fail_worker, fail_step = (os.environ.get("TRAIN_FAIL") or "none:-1").split(":")
    fail_epoch = int(fail_step[3:]) if fail_step.startswith("val") else None
    stop_size, stop_steps = map(int, (os.environ.get("TRAIN_STOP") or "0:0").split(":"))
    pause = float(os.environ.get("TRAIN_SLEEP", "0"))
    progress = os.environ.get("TRAIN_PROGRESS", "")

    def describe(trainer: "pl.Trainer", net: torch.nn.Module) -> str:
        return (f"worker {worker} pid {os.getpid()} rank {rt.rank()} size {rt.size()} step {trainer.global_step} "
                f"epoch {trainer.current_epoch}")

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model()
            self.started_at_step = 0
            self.first = False

        def train_dataloader(self):
            # Unshuffled (Lightning would put a shuffling one); elastic fits split it their own way.
            dataset = TensorDataset(*data())
            sampler = DistributedSampler(dataset, num_replicas=self.trainer.world_size, rank=self.global_rank,
                                         shuffle=False)
            return DataLoader(dataset, batch_size=BATCH, sampler=sampler)

        def training_step(self, batch, batch_idx):
            time.sleep(pause)
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def val_dataloader(self):
            return DataLoader(TensorDataset(*data()), batch_size=BATCH)

        def validation_step(self, batch, batch_idx):
            if worker == fail_worker and self.trainer.current_epoch == fail_epoch and batch_idx == 1:
                print(f"victim worker {worker} pid {os.getpid()} failing at {time.time():.3f} "
                      f"step {self.trainer.global_step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

        def configure_optimizers(self):
            return optimizer(self.net)

        def on_train_start(self):
            self.started_at_step, self.first = self.trainer.global_step, True
            print(f"start {describe(self.trainer, self.net)} at {time.time():.3f} "
                  f"params {flat(self.net).numpy().tobytes().hex()}", flush=True)

        def on_train_batch_start(self, batch, batch_idx):
            if worker == fail_worker and fail_epoch is None and self.trainer.global_step == int(fail_step):
                print(f"victim worker {worker} pid {os.getpid()} failing at {time.time():.3f} "
                      f"step {self.trainer.global_step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            step = self.trainer.global_step
            if self.first:
                print(f"first step size {rt.size()} at {time.time():.3f}", flush=True)
                self.first = False
            if progress and rt.rank() == 0:
                with open(progress + ".tmp", "w") as f:
                    f.write(f"{step} {rt.size()}\n")
                os.replace(progress + ".tmp", progress)
            if rt.size() == stop_size and step >= self.started_at_step + stop_steps:
                self.trainer.should_stop = True

    def fitted(strategy: RingStrategy) -> "tuple[pl.Trainer, Regression]":
        net = Regression()
        trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=1, logger=False,
                             max_epochs=int(os.environ.get("TRAIN_EPOCHS", "3")), enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=None if fail_epoch is not None else 0)
        trainer.fit(net)
        return trainer, net

    sharded = os.environ.get("TRAIN_SHARDED") == "1"
    trainer, net = fitted(RingStrategy(elastic=True, commit_every_n_steps=COMMIT_EVERY, shard_optimizer_state=sharded))
    print(f"done {describe(trainer, net.net)} params {flat(net.net).numpy().tobytes().hex()}", flush=True)
    if os.environ.get("TRAIN_PLAIN") == "1":
        _, plain = fitted(RingStrategy())
        print(f"plain params {flat(plain.net).numpy().tobytes().hex()}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
