"""Elastic PyTorch training on synthetic data, written as a Horovod elastic script.

The training loop runs under ``hvd.elastic.run``; the model, the optimizer,
the ``ElasticSampler`` and the epoch and batch counters live in a
``TorchState`` that is committed in memory every ``--batches-per-commit``
batches. When a worker is lost the others roll back to the last commit and
go on without it; when a host is added its new worker takes rank 0's state
at the next commit. The learning rate follows the number of workers.

Run it elastically, on the hosts a discovery script lists (here this
machine's loopback addresses, one worker each)::

    printf '127.0.0.1\\n127.0.0.2\\n' > hosts.txt
    ringrun -np 2 --min-np 1 --max-np 3 --host-discovery-script 'cat hosts.txt' \\
        python examples/elastic_torch.py
    # meanwhile, add a host: echo 127.0.0.3 >> hosts.txt

or as a plain data-parallel job (a reset re-forms the same workers)::

    ringrun -np 2 python examples/elastic_torch.py

A Horovod elastic script moves over by changing one import: ``import
horovod.torch as hvd`` becomes ``import ring_strategy.torch as hvd``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

import torch
import torch.nn.functional as F

import ring_strategy.torch as hvd


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2048, help="samples in the synthetic data set")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--batches-per-commit", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate for one worker (scaled by size)")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to pause after each step")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def synthetic_data(samples: int, seed: int) -> torch.utils.data.TensorDataset:
    """Features and the class a fixed random linear map gives them (the same on every worker)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 20, generator=gen)
    y = (x @ torch.randn(20, 4, generator=gen)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    torch.manual_seed(args.seed + hvd.rank())  # different on purpose: the state's first sync fixes it

    dataset = synthetic_data(args.samples, args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)

    def log(message: str) -> None:
        if hvd.rank() == 0:
            print(message, flush=True)

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        # Called again after every reset: the loader takes the sampler's share
        # of the rest of the epoch in the world as it is now.
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=state.sampler)
        while state.epoch < args.epochs:
            done = state.batch
            total, count = 0.0, 0
            for batch_idx, (x, y) in enumerate(loader):
                state.optimizer.zero_grad()
                loss = F.cross_entropy(state.model(x), y)
                loss.backward()
                state.optimizer.step()
                total, count = total + loss.item(), count + 1
                state.sampler.record_batch(batch_idx, args.batch_size)
                state.batch = done + batch_idx + 1
                if args.step_sleep:
                    time.sleep(args.step_sleep)
                if state.batch % args.batches_per_commit == 0:
                    state.commit()
            log(f"epoch {state.epoch}: loss {total / max(count, 1):.4f} on {hvd.size()} worker(s)")
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)
            state.commit()

    def on_reset() -> None:
        # The world changed: keep the learning rate proportional to its size.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        log(f"reset: {hvd.size()} worker(s) now, resuming epoch {state.epoch} at batch {state.batch}")

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.register_reset_callbacks([on_reset])
    train(state)

    # The replicas must be identical: compare a digest of the weights.
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())).hexdigest()
    same = len(set(hvd.allgather_object(digest))) == 1
    log(f"parameters identical on all {hvd.size()} workers: {same}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
