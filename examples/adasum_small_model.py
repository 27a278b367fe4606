"""A small model trained with Adasum and with plain averaging, side by side.

Every worker fits the same small network to its own shard of a synthetic
regression problem, twice from the same start: once with
``DistributedOptimizer(op=hvd.Adasum)`` (each worker takes its own optimizer
step and the workers' changes are combined by adaptive summation, see
docs/adasum.md) and once with ``op=hvd.Average`` (gradients averaged). Rank 0
prints the loss on the whole data set after every epoch for both.

Adasum combines the workers' steps like a sum when they are orthogonal and
like an average when they agree, so which of the two does better depends on
the problem, the learning rate and the number of workers: compare the
columns, and try ``--lr`` and ``-np 4``.

Run it with two (or four, eight: a power of two) workers::

    ringrun -np 2 python examples/adasum_small_model.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import ring_strategy.torch as hvd


def make_data(rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets from a hidden random network plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 16, generator=g)
    hidden = torch.randn(16, 4, generator=g)
    y = torch.tanh(x @ hidden) + 0.05 * torch.randn(rows, 4, generator=g)
    return x, y


def make_model() -> nn.Module:
    torch.manual_seed(42)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def train(op: int, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """Trains a fresh model with ``op``; returns the full-data loss after each epoch."""
    model = make_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=op)
    shard_x, shard_y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    losses = []
    for _ in range(args.epochs):
        for i in range(0, len(shard_x), args.batch):
            opt.zero_grad()
            F.mse_loss(model(shard_x[i:i + args.batch]), shard_y[i:i + args.batch]).backward()
            opt.step()
        with torch.no_grad():
            losses.append(F.mse_loss(model(x), y).item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--rows", type=int, default=512)
    args = parser.parse_args()

    hvd.init()
    x, y = make_data(args.rows)
    adasum = train(hvd.Adasum, x, y, args)
    average = train(hvd.Average, x, y, args)
    if hvd.rank() == 0:
        print(f"{hvd.size()} workers, {args.epochs} epochs, batch {args.batch} per worker, lr {args.lr}")
        for epoch, (a, b) in enumerate(zip(adasum, average), 1):
            print(f"epoch {epoch:2d}  loss adasum {a:.5f}  average {b:.5f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
