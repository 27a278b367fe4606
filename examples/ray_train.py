"""Data-parallel PyTorch training on Ray: each worker is a Ray actor.

The driver starts (or joins) a Ray cluster, starts the workers with
:class:`ring_strategy.ray.RayExecutor` and sends them a training function. The
function is an ordinary Horovod-style loop: ``hvd.init()``, the model from
rank 0, DistributedOptimizer, and each worker's own shard of synthetic
regression data. The driver prints the loss of every epoch and checks that
the replicas ended identical.

Run it on this machine (a local Ray instance with one CPU per worker)::

    python examples/ray_train.py --num-workers 2

or on a running cluster::

    python examples/ray_train.py --address auto --num-workers 4
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Dict, List

import ray

from ring_strategy.ray import RayExecutor


def train(epochs: int, steps: int, batch_size: int, lr: float) -> Dict[str, object]:
    """One worker's training; runs inside a Ray actor."""
    import torch
    import torch.nn.functional as F

    import ring_strategy.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(hvd.rank())  # different on purpose: the broadcast below fixes it
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr * hvd.size()),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    # The task is the same everywhere; the samples are this worker's own.
    true_weights = torch.randn(16, 1, generator=torch.Generator().manual_seed(0))
    data = torch.Generator().manual_seed(1000 + hvd.rank())
    losses: List[float] = []
    for _ in range(epochs):
        total = 0.0
        for _ in range(steps):
            x = torch.randn(batch_size, 16, generator=data)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), x @ true_weights)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(hvd.allreduce(torch.tensor(total / steps), name="epoch_loss").item())
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    return {"rank": hvd.rank(), "losses": losses, "digest": digest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--address", default=None, help="Ray cluster to join (default: start a local one)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one worker (scaled by size)")
    args = parser.parse_args()

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_workers, include_dashboard=False)
    executor = RayExecutor(num_workers=args.num_workers, cpus_per_worker=1)
    executor.start()
    try:
        results = executor.run(train, args=(args.epochs, args.steps, args.batch_size, args.lr))
    finally:
        executor.shutdown()
        ray.shutdown()
    for epoch, loss in enumerate(results[0]["losses"]):
        print(f"epoch {epoch}: mean loss {loss:.4f}", flush=True)
    same = len({r["digest"] for r in results}) == 1
    print(f"parameters identical on all {len(results)} workers: {same}", flush=True)


if __name__ == "__main__":
    main()
