"""Data-parallel PyTorch training on synthetic data, written as a Horovod script.

Every worker holds the same model (broadcast from rank 0), trains on its own
synthetic batches, and DistributedOptimizer averages the gradients, so all
workers take identical steps. Rank 0 reports throughput in samples/s.

Run it with two workers::

    ringrun -np 2 python examples/pytorch_synthetic.py

or alone (a world of one)::

    python examples/pytorch_synthetic.py

A Horovod script moves over by changing one import: ``import horovod.torch
as hvd`` becomes ``import ring_strategy.torch as hvd``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import timeit

import torch
import torch.nn as nn
import torch.nn.functional as F

import ring_strategy.torch as hvd


class SmallCNN(nn.Module):
    """A small CNN for 3x32x32 inputs."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class MLP(nn.Module):
    """A 3-layer perceptron for 3x32x32 inputs."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
            nn.Linear(256, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs")
    parser.add_argument("--num-iters", type=int, default=10, help="steps per epoch")
    parser.add_argument("--num-warmup-iters", type=int, default=3, help="untimed steps before the first epoch")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one worker (scaled by size)")
    parser.add_argument("--fp16-allreduce", action="store_true", help="send gradients as float16")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hvd.init()
    # Share the cores among the workers on this host instead of oversubscribing them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    torch.manual_seed(args.seed + hvd.rank())  # different on purpose: the broadcast below fixes it

    model = SmallCNN() if args.model == "cnn" else MLP()
    # Linear scaling of the learning rate with the global batch.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression,
    )
    # Every worker starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, 32, 32)
    target = torch.randint(0, 10, (args.batch_size,))

    def benchmark_step() -> float:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        return loss.item()

    def log(message: str) -> None:
        if hvd.rank() == 0:
            print(message, flush=True)

    log(f"model {args.model}, batch size {args.batch_size} per worker, {hvd.size()} worker(s), "
        f"{torch.get_num_threads()} thread(s) each")
    for _ in range(args.num_warmup_iters):
        benchmark_step()

    rates = []
    loss = float("nan")
    for epoch in range(args.epochs):
        start = timeit.default_timer()
        for _ in range(args.num_iters):
            loss = benchmark_step()
        elapsed = timeit.default_timer() - start
        rate = args.batch_size * args.num_iters / elapsed
        rates.append(rate)
        log(f"epoch {epoch}: {rate:.1f} samples/s per worker, loss {loss:.4f}")

    mean = sum(rates) / len(rates)
    log(f"samples/s per worker: {mean:.1f}")
    log(f"total samples/s on {hvd.size()} worker(s): {mean * hvd.size():.1f}")

    # The replicas must still be identical: compare a digest of the weights.
    digest = hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())
    ).hexdigest()
    same = len(set(hvd.allgather_object(digest))) == 1
    log(f"parameters identical on all {hvd.size()} workers: {same}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
