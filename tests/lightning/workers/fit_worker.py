"""Real Trainer runs with strategy="ring", several scenarios in one process
(Lightning's start-up is the slow part).

    python fit_worker.py --devices 2 --out DIR      # self-launched: starts rank 1
    ringrun -np 2 python fit_worker.py --devices 2 --out DIR
    python fit_worker.py --reference --out DIR      # one process, global batch

Each rank writes DIR/rank<R>.json: per scenario the final parameters and
what the test checks. The reference runs the same scenarios with Lightning's
default single-device strategy and a batch twice as large, so its parameters
must equal the two-worker ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import ring_strategy  # noqa: F401  (registers strategy="ring")
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, FEATURES, BATCH = 64, 8, 8  # BATCH per worker; the reference uses 2 * BATCH


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = x @ torch.randn(FEATURES, 1, generator=g) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


class Net(pl.LightningModule):
    def __init__(self, manual: bool = False, lr: float = 0.05) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.automatic_optimization = not manual
        self.lr = lr
        self.gathered = None

    def train_dataloader(self):
        # Lightning would inject a *shuffling* DistributedSampler (it always
        # shuffles training data when distributed); an unshuffled one gives
        # rank r the samples r, r+2, ..., so each step's two batches together
        # are the reference's one batch.
        data, world = dataset(), self.trainer.world_size
        if world == 1:
            return DataLoader(data, batch_size=2 * BATCH)
        sampler = DistributedSampler(data, num_replicas=world, rank=self.global_rank, shuffle=False)
        return DataLoader(data, batch_size=BATCH, sampler=sampler)

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("rank_mean", float(self.global_rank), sync_dist=True, on_step=False, on_epoch=True)
        self.log("rank_max", float(self.global_rank), sync_dist=True, reduce_fx="max", on_step=False, on_epoch=True)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=0.3, gradient_clip_algorithm="norm")
        opt.step()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch), sync_dist=True)

    def on_validation_epoch_end(self):
        self.gathered = self.all_gather(torch.tensor([self.global_rank, 7])).tolist()

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.loss(batch), sync_dist=True)

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class EarlyStopNet(Net):
    """Rank 0's monitored value never improves, the others' always do."""

    def on_validation_epoch_end(self):
        value = 1.0 if self.global_rank == 0 else 1.0 / (self.current_epoch + 1)
        self.log("es_metric", value, sync_dist=False)


def trainer(args, **kwargs) -> pl.Trainer:
    common = dict(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, num_sanity_val_steps=0, deterministic=True,
    )
    common.update(kwargs)
    if args.reference:
        return pl.Trainer(strategy="auto", devices=1, **common)
    return pl.Trainer(strategy="ring", devices=args.devices, **common)


def loader(args) -> DataLoader:
    """A plain loader: Lightning injects the DistributedSampler."""
    return DataLoader(dataset(), batch_size=BATCH * (2 if args.reference else 1))


def params(model: torch.nn.Module) -> list:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {}

    # 1. Automatic optimization: accumulation (sync on the last micro-batch
    #    only), clipping on averaged gradients, sync_dist, all_gather,
    #    validation, test and predict loops.
    pl.seed_everything(0, verbose=False)
    model = Net()
    val = loader(args)
    t = trainer(args, max_epochs=2, accumulate_grad_batches=2, gradient_clip_val=0.3)
    t.fit(model, val_dataloaders=val)
    rank = t.global_rank
    result["auto"] = {
        "params": params(model),
        "rank_mean": t.callback_metrics["rank_mean"].item(),
        "rank_max": t.callback_metrics["rank_max"].item(),
        "val_loss": t.callback_metrics["val_loss"].item(),
        "gathered": model.gathered,
        "global_step": t.global_step,
        "world_size": t.world_size,
        "strategy": type(t.strategy).__name__,
        "val_sampler": type(t.val_dataloaders.sampler).__name__,
    }
    t.test(model, val, verbose=False)
    result["auto"]["test_loss"] = t.callback_metrics["test_loss"].item()
    predictions = t.predict(model, val)
    result["auto"]["predicted_rows"] = sum(p.shape[0] for p in predictions)

    # 2. Manual optimization (a second fit in the same process, new Trainer).
    pl.seed_everything(0, verbose=False)
    model = Net(manual=True)
    t = trainer(args, max_epochs=2)
    t.fit(model)
    result["manual"] = {"params": params(model), "global_step": t.global_step}

    # 3. Early stopping: the ranks' decisions are combined, all stop together.
    if not args.reference:
        pl.seed_everything(0, verbose=False)
        model = EarlyStopNet()
        stop = EarlyStopping(monitor="es_metric", mode="min", patience=1, check_on_train_epoch_end=False)
        t = trainer(args, max_epochs=8, callbacks=[stop])
        t.fit(model, loader(args), val)
        result["early_stop"] = {"epoch": t.current_epoch, "stopped_epoch": stop.stopped_epoch,
                                "should_stop": t.should_stop,
                                "sampler": type(t.train_dataloader.sampler).__name__}

    # 4. Checkpoint: rank 0 writes it; fit again from it (same Trainer object
    #    fits twice), then resume in a fresh Trainer with a new model.
    pl.seed_everything(0, verbose=False)
    ckpt_dir = out / "ckpt"
    model = Net()
    saver = ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=-1, every_n_epochs=1)
    t = trainer(args, max_epochs=2, callbacks=[saver], enable_checkpointing=True)
    t.fit(model)
    t.fit_loop.max_epochs = 3
    t.fit(model, ckpt_path=str(ckpt_dir / "last.ckpt"))
    pl.seed_everything(1, verbose=False)
    resumed = Net()
    t2 = trainer(args, max_epochs=4)
    t2.fit(resumed, ckpt_path=str(ckpt_dir / "last.ckpt"))
    result["checkpoint"] = {
        "after_3": params(model), "resumed_4": params(resumed), "global_step": t2.global_step,
        "files": sorted(p.name for p in ckpt_dir.iterdir()),
    }

    result["pid"] = os.getpid()
    result["job_id"] = os.environ.get("RING_JOB_ID")
    result["horovod_rank"] = os.environ.get("HOROVOD_RANK")  # horovodrun's name, on every launcher path
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
