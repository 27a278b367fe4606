"""Data-parallel logistic regression in plain numpy.

Every worker holds the same weights, computes the gradient on its own shard of
a synthetic data set, and ring averages the gradients before each step, so all
workers take the same step and stay identical.

Run it with two workers::

    ringrun -np 2 python examples/numpy_logreg.py

or alone (a world of one)::

    python examples/numpy_logreg.py
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np

import ring_strategy as rs


def make_data(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A linearly separable-ish problem: labels from a hidden weight vector plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    true_w = rng.normal(size=dim).astype(np.float32)
    logits = x @ true_w + 0.5 * rng.normal(size=n).astype(np.float32)
    y = (logits > 0).astype(np.float32)
    return x, y


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean binary cross-entropy and its gradient (last weight is the bias)."""
    z = x @ w[:-1] + w[-1]
    p = 1.0 / (1.0 + np.exp(-z))
    eps = 1e-7
    loss = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    err = (p - y) / len(y)
    grad = np.concatenate([x.T @ err, [err.sum()]]).astype(np.float32)
    return float(loss), grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=20)
    args = parser.parse_args()

    rs.init()
    rank, size = rs.rank(), rs.size()

    # Every rank makes the same data set (fixed seed) and keeps its own shard.
    x, y = make_data(args.samples, args.dim, seed=1234)
    x, y = x[rank::size], y[rank::size]

    # Start from rank 0's weights: the other ranks' random start is overwritten.
    w = np.random.default_rng(rank).normal(scale=0.01, size=args.dim + 1).astype(np.float32)
    w = rs.broadcast(w, root_rank=0, name="initial_weights")

    for epoch in range(args.epochs):
        loss, grad = loss_and_grad(w, x, y)
        grad = rs.allreduce(grad, op=rs.Average, name="grad")
        mean_loss = float(rs.allreduce(np.array([loss], np.float32), op=rs.Average, name="loss")[0])
        w -= args.lr * grad
        if rank == 0 and (epoch % 10 == 0 or epoch == args.epochs - 1):
            print(f"epoch {epoch:3d}  loss {mean_loss:.4f}")

    # Proof that data parallelism kept the replicas in sync: gather a digest
    # of every rank's weights and compare them.
    digest = np.frombuffer(hashlib.sha256(w.tobytes()).digest(), dtype=np.uint8).copy()
    digests = rs.allgather(digest[None, :], name="weights_digest")
    identical = bool((digests == digests[0]).all())
    if rank == 0:
        accuracy = float(np.mean(((x @ w[:-1] + w[-1]) > 0) == (y > 0.5)))
        print(f"accuracy on rank 0's shard: {accuracy:.3f}")
        print(f"parameters identical on all {size} workers: {identical}")
    rs.shutdown()
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
