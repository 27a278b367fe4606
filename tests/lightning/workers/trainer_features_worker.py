"""Trainer(strategy="ring") beyond Horovod on two self-launched workers:
sync_batchnorm=True and RingStrategy(shard_optimizer_state=True).

    python trainer_features_worker.py --out DIR       # rank 0 starts rank 1

Synced batch norm: each rank fits a small conv net with BatchNorm2d and BatchNorm1d layers on
its half of every global batch (rank r takes samples r, r+2, ...) and writes
DIR/rank<R>.json: the layers' running statistics and the parameters after
the fit, the classes of the batch-norm layers during and after it, and, on
rank 0, the same figures from plain torch (no Lightning, no ring) trained on
the whole global batch in one process, and from rank 0's half alone.

Sharded optimizer state: an Adam fit with the unsharded strategy and one
with shard_optimizer_state=True from the same start, a checkpoint of each,
and a third epoch resumed from each checkpoint; the parameters of the pairs
and the two checkpoints' optimizer states are compared bitwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List

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


class AdamNet(Net):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(50, 9), torch.nn.Tanh(), torch.nn.Linear(9, 1))

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01, weight_decay=1e-3)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def _trainer(strategy: Any, epochs: int, **kwargs: Any) -> pl.Trainer:
    return pl.Trainer(strategy=strategy, accelerator="cpu", devices=2, max_epochs=epochs, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, **kwargs)


def _equal_states(a: Dict, b: Dict) -> bool:
    return a["param_groups"] == b["param_groups"] and sorted(a["state"]) == sorted(b["state"]) and all(
        torch.equal(torch.as_tensor(a["state"][i][k]), torch.as_tensor(b["state"][i][k]))
        for i in a["state"] for k in a["state"][i])


def sharded(out: Path) -> Dict[str, Any]:
    """Unsharded and sharded Adam fits, their checkpoints, and a resumed epoch from each."""
    from ring_strategy.lightning import RingStrategy

    params, states = {}, {}
    for shard in (False, True):
        model, path = AdamNet(), out / f"sharded{shard}.ckpt"
        trainer = _trainer(RingStrategy(shard_optimizer_state=shard), EPOCHS)
        trainer.fit(model)
        trainer.save_checkpoint(path)
        states[shard] = torch.load(path, weights_only=False)["optimizer_states"][0]
        params[shard] = [p.detach().clone() for p in model.parameters()]
        resumed = AdamNet()
        _trainer(RingStrategy(shard_optimizer_state=shard), EPOCHS + 1).fit(resumed, ckpt_path=path)
        params[f"resumed{shard}"] = [p.detach().clone() for p in resumed.parameters()]
        states[f"kind{shard}"] = type(trainer.strategy.optimizers[0]).__mro__[1].__name__
    return {
        "fit_bitwise": all(torch.equal(a, b) for a, b in zip(params[False], params[True])),
        "checkpoint_states_equal": _equal_states(states[False], states[True]),
        "resumed_bitwise": all(torch.equal(a, b) for a, b in zip(params["resumedFalse"], params["resumedTrue"])),
        "moved": not all(torch.equal(a, b) for a, b in zip(params[True], params["resumedTrue"])),
        "sharded_class": states["kindTrue"],
    }


def clipped() -> Dict[str, bool]:
    """Fits clipped by norm (active: a small limit) and by value, with two
    accumulated batches a step: sharded bitwise equal to unsharded."""
    from ring_strategy.lightning import RingStrategy

    same = {}
    for algorithm, limit in (("norm", 0.05), ("value", 0.01)):
        params = []
        for shard in (False, True):
            model = AdamNet()
            _trainer(RingStrategy(shard_optimizer_state=shard), 1, gradient_clip_val=limit,
                     gradient_clip_algorithm=algorithm, accumulate_grad_batches=2).fit(model)
            params.append([p.detach().clone() for p in model.parameters()])
        same[algorithm] = all(torch.equal(a, b) for a, b in zip(*params))
    return same


def compressed() -> Dict[str, Any]:
    """An Adam fit with RingStrategy(compression=PowerSGD(...)): the ranks end
    identical, the first layer's weight went low-rank, the last (1 x 9) whole."""
    import ring_strategy.torch as rt
    from ring_strategy.lightning import RingStrategy

    seen: Dict[str, Any] = {}

    class Grab(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            seen["reducer"] = trainer.strategy._grad_sync._reducer

    model = AdamNet()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    _trainer(RingStrategy(compression=rt.PowerSGD(rank=1, warmup_steps=1, min_size=16)), EPOCHS,
             callbacks=[Grab()]).fit(model)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    both = rt.allgather(after.unsqueeze(0), name="compressed.params")
    reducer = seen["reducer"]
    return {"identical": torch.equal(both[0], both[1]), "moved": not torch.equal(before, after),
            "steps": reducer.steps, "sent_bytes": reducer.sent_bytes, "dense_bytes": reducer.dense_bytes,
            "compressed": [reducer.compresses(p) for p in model.parameters()]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trainer = _trainer("ring", EPOCHS, sync_batchnorm=True)
    model = Net()
    trainer.fit(model)
    result = {
        "ranks": trainer.world_size,
        "during_fit": model.seen,
        "after_fit": sorted({type(m).__name__ for m in model.net if "Norm" in type(m).__name__}),
        "layer_sync": type(trainer.strategy._layer_sync).__name__,
        "ring": figures(model.net),
    }
    result["sharded"] = sharded(args.out)
    result["clipped"] = clipped()
    result["compressed"] = compressed()
    if trainer.global_rank == 0:
        result["global_batch"] = plain_torch(slice(None))
        result["half_batch"] = plain_torch(slice(0, None, 2))
    (args.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
