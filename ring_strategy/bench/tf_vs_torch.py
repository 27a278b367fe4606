"""``python -m ring_strategy.bench.tf_vs_torch``: TensorFlow's collectives
against torch's, in one job.

Two cases, each timed round by round for both frameworks in the same
processes (medians of ``--steps`` steps per round, then of the rounds):

- **grouped**: ``hvd.grouped_allreduce`` of ``--num-tensors`` float32
  tensors of ``--tensor-bytes`` (200 x 16 KiB: a training step's small
  gradients), through ``ring_strategy.torch`` (out of place), TensorFlow
  eagerly, and TensorFlow inside a ``tf.function`` that takes the tensors as
  arguments; with the cost of calling an identity ``tf.function`` of as
  many arguments beside it (TensorFlow's own share of that row), and a
  ``tf.function`` that computes the tensors inside (as a step computes its
  gradients) before reducing them.
- **step**: one SGD step of the same MLP (784-1024-768-10, batch 64 per
  rank): torch with ``hvd.DistributedOptimizer`` against a ``tf.function``
  step with ``hvd.DistributedGradientTape``, each beside its
  no-communication step.

Rank 0 prints milliseconds and TensorFlow / torch ratios. One thread per
rank for both frameworks.

Example::

    ringrun -np 2 python -m ring_strategy.bench.tf_vs_torch
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ring_strategy.bench.options import _positive

__all__ = ["build_parser", "main"]

SIZES = (784, 1024, 768, 10)


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``python -m ring_strategy.bench.tf_vs_torch``."""
    p = argparse.ArgumentParser(prog="python -m ring_strategy.bench.tf_vs_torch",
                                description="TensorFlow's collectives and training step against torch's.")
    p.add_argument("--num-tensors", type=_positive, default=200, help="tensors per grouped call (default: 200)")
    p.add_argument("--tensor-bytes", type=_positive, default=16384, help="bytes per tensor (default: 16384)")
    p.add_argument("--batch-size", type=_positive, default=64, help="samples per rank per step (default: 64)")
    p.add_argument("--steps", type=_positive, default=30, help="timed steps per round (default: 30)")
    p.add_argument("--rounds", type=_positive, default=5, help="rounds; medians are printed (default: 5)")
    return p


def _median_ms(fn: Callable[[], object], steps: int) -> float:
    import ring_strategy as rs

    rs.barrier()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _grouped_cases(args: argparse.Namespace) -> Dict[str, Callable[[], object]]:
    import tensorflow as tf
    import torch

    import ring_strategy.tensorflow as htf
    import ring_strategy.torch as hvd

    n = args.tensor_bytes // 4
    pt = [torch.full((n,), float(i)) for i in range(args.num_tensors)]
    tt = [tf.fill([n], float(i)) for i in range(args.num_tensors)]
    in_function = tf.function(lambda xs: htf.grouped_allreduce(xs))
    identity = tf.function(lambda xs: [tf.identity(x) for x in xs])
    seed = tf.constant(1.0)
    # The tensors computed inside the function, as a step's gradients are:
    # no per-argument cost, one multiply per tensor instead.
    inside = tf.function(lambda s: htf.grouped_allreduce([t * s for t in tt]))
    return {"torch grouped": lambda: hvd.grouped_allreduce(pt),
            "tf eager grouped": lambda: htf.grouped_allreduce(tt),
            "tf.function grouped": lambda: in_function(tt),
            "tf.function identity (no ring)": lambda: identity(tt),
            "tf.function grouped, tensors made inside": lambda: inside(seed)}


def _torch_steps(args: argparse.Namespace) -> Dict[str, Callable[[], object]]:
    import torch

    import ring_strategy.torch as hvd

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        layers: List[torch.nn.Module] = []
        for a, b in zip(SIZES[:-1], SIZES[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    x, y = torch.randn(args.batch_size, SIZES[0]), torch.randint(0, SIZES[-1], (args.batch_size,))
    # Two models: the distributed optimizer hooks its model's gradients.
    models = [mlp(), mlp()]
    plain = torch.optim.SGD(models[0].parameters(), lr=0.01)
    dist = hvd.DistributedOptimizer(torch.optim.SGD(models[1].parameters(), lr=0.01),
                                    named_parameters=models[1].named_parameters())

    def step(opt, model):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return {"torch step, no communication": lambda: step(plain, models[0]),
            "torch step, DistributedOptimizer": lambda: step(dist, models[1])}


def _tf_steps(args: argparse.Namespace) -> Dict[str, Callable[[], object]]:
    import tensorflow as tf

    import ring_strategy.tensorflow as htf

    rng = np.random.default_rng(0)
    weights = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        weights += [tf.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.03), tf.Variable(tf.zeros([b]))]
    x = tf.constant(rng.standard_normal((args.batch_size, SIZES[0])).astype(np.float32))
    y = tf.constant(rng.integers(0, SIZES[-1], args.batch_size))

    def loss():
        h = x
        for i in range(0, len(weights), 2):
            h = h @ weights[i] + weights[i + 1]
            h = tf.nn.relu(h) if i + 2 < len(weights) else h
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))

    def make(distributed: bool):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                value = loss()
            if distributed:
                tape = htf.DistributedGradientTape(tape)
            for w, g in zip(weights, tape.gradient(value, weights)):
                w.assign_sub(0.01 * g)
        return step
    return {"tf.function step, no communication": make(False),
            "tf.function step, DistributedGradientTape": make(True)}


def _measure(cases: Dict[str, Callable[[], object]], args: argparse.Namespace) -> Dict[str, float]:
    for fn in cases.values():  # trace, compile and warm up
        for _ in range(3):
            fn()
    rounds: Dict[str, List[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, fn in cases.items():
            rounds[k].append(_median_ms(fn, args.steps))
    return {k: statistics.median(v) for k, v in rounds.items()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs both cases; returns 0."""
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import torch

    import ring_strategy.tensorflow as htf
    import ring_strategy.torch as hvd
    from ring_strategy import _native_ops

    torch.set_num_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    htf.init()
    grouped = _measure(_grouped_cases(args), args)
    steps = _measure({**_torch_steps(args), **_tf_steps(args)}, args)
    if hvd.rank() == 0:
        print(f"np={hvd.size()}, TensorFlow collectives: {_native_ops.describe('tensorflow')}")
        for k, v in {**grouped, **steps}.items():
            print(f"  {k:<45} {v:8.3f} ms")
        t = grouped["torch grouped"]
        print(f"  tf eager grouped / torch grouped:              {grouped['tf eager grouped'] / t:.2f}")
        print(f"  tf.function grouped / torch grouped:           {grouped['tf.function grouped'] / t:.2f}")
        print(f"  tf.function grouped, made inside / torch:      "
              f"{grouped['tf.function grouped, tensors made inside'] / t:.2f}")
        print(f"  tf.function step / torch step (distributed):   "
              f"{steps['tf.function step, DistributedGradientTape'] / steps['torch step, DistributedOptimizer']:.2f}")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
