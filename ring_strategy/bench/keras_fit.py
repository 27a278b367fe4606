"""``python -m ring_strategy.bench.keras_fit``: Keras ``model.fit`` with
ring's ``DistributedOptimizer`` against the plain optimizer, in one job.

An MLP of dense layers (784-1024-768-10 by default, about 1.6 M
parameters) trains on synthetic data with SGD on the Keras backend that
``KERAS_BACKEND`` names. Every round runs, on every rank at once, one
``fit`` epoch of ``--steps`` batches with the plain optimizer (no
communication: the ceiling on this machine) and one with
``keras_callbacks.DistributedOptimizer``; rank 0 prints the median
samples/s of each and their ratio, and which way the backend's collectives
reach the engine (native operations or host calls).

Each rank computes with ``--threads`` threads (default 1: TensorFlow's
default pool of one thread per core makes its step time flip between two
speeds from round to round on 2 cores).

Example::

    KERAS_BACKEND=jax ringrun -np 2 python -m ring_strategy.bench.keras_fit
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ring_strategy.bench.options import _positive

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``python -m ring_strategy.bench.keras_fit``."""
    p = argparse.ArgumentParser(prog="python -m ring_strategy.bench.keras_fit",
                                description="Keras fit throughput, DistributedOptimizer / plain optimizer.")
    p.add_argument("--input", type=_positive, default=784, help="input features (default: 784)")
    p.add_argument("--hidden", type=_positive, nargs="+", default=[1024, 768], help="hidden widths")
    p.add_argument("--classes", type=_positive, default=10, help="outputs (default: 10)")
    p.add_argument("--batch-size", type=_positive, default=64, help="samples per rank per step (default: 64)")
    p.add_argument("--steps", type=_positive, default=30, help="batches per timed fit (default: 30)")
    p.add_argument("--rounds", type=_positive, default=5, help="rounds; medians are printed (default: 5)")
    p.add_argument("--threads", type=_positive, default=1,
                   help="compute threads per rank, set for the backend in use (default: 1, a core per rank "
                        "at np=2 on 2 cores)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results as JSON")
    return p


def _limit_threads(n: int) -> None:
    """Gives every backend ``n`` compute threads (before Keras imports one),
    through the settings ringrun chooses (ring_strategy/runner/threads.py),
    forced to ``n`` whatever ringrun or the environment chose."""
    from ring_strategy.runner import threads

    ours = ("xla_cpu_multi_thread_eigen", "intra_op_parallelism_threads")
    others = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if not f.lstrip("-").startswith(ours))
    chosen = {"OMP_NUM_THREADS": str(n)}
    os.environ.update(chosen)
    os.environ.update(threads.thread_variables({**chosen, "XLA_FLAGS": others}, local_size=1))


def _model(args: argparse.Namespace, optimizer: Any) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    layers = [keras.Input((args.input,))] + [keras.layers.Dense(w, activation="relu") for w in args.hidden]
    model = keras.Sequential(layers + [keras.layers.Dense(args.classes)])
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _rate(model: Any, x: np.ndarray, y: np.ndarray, batch: int, samples: int) -> float:
    """Samples/s of the whole job for one epoch (the slowest rank's time)."""
    import ring_strategy as rs

    rs.barrier()
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    took = float(rs.allreduce(np.array([time.perf_counter() - start]), op=rs.Max)[0])
    return samples / took


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark; returns 0."""
    args = build_parser().parse_args(argv)
    _limit_threads(args.threads)
    import keras

    import keras_callbacks as hvd
    from ring_strategy import _native_ops

    hvd.init()
    n = hvd.size()
    rng = np.random.default_rng(hvd.rank())
    x = rng.standard_normal((args.batch_size * args.steps, args.input)).astype(np.float32)
    y = rng.integers(0, args.classes, args.batch_size * args.steps)
    models = {"plain": _model(args, keras.optimizers.SGD(0.01)),
              "ring": _model(args, hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)))}
    params = models["plain"].count_params()
    for m in models.values():  # compile and warm up
        m.fit(x[:args.batch_size * 2], y[:args.batch_size * 2], batch_size=args.batch_size, epochs=1, verbose=0)
    rates: Dict[str, List[float]] = {k: [] for k in models}
    for _ in range(args.rounds):
        for k, m in models.items():
            rates[k].append(_rate(m, x, y, args.batch_size, n * args.batch_size * args.steps))
    med = {k: statistics.median(v) for k, v in rates.items()}
    backend = keras.backend.backend()
    path = _native_ops.describe(backend) if backend in ("tensorflow", "jax") else "torch front end"
    if hvd.rank() == 0:
        print(f"keras fit, backend {backend}, np={n}, {params / 1e6:.2f} M parameters, batch {args.batch_size}/rank "
              f"(collectives: {path})")
        for k in models:
            print(f"  {k:<6} {med[k]:10.0f} samples/s  (rounds: {', '.join(f'{r:.0f}' for r in rates[k])})")
        print(f"  ratio ring / plain: {med['ring'] / med['plain']:.2f}")
        if args.json is not None:
            args.json.write_text(json.dumps({"backend": backend, "np": n, "params": params, "rates": rates,
                                             "ratio": med["ring"] / med["plain"], "path": path}, indent=1) + "\n")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
