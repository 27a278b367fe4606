"""``bench.train --case compression``: bytes sent per step and the loss curve, PowerSGD against no compression.

A small task every setup can learn: the MLP of ``bench.train`` classifies
inputs by a fixed random teacher (``argmax(x W)``); each rank draws a fresh
batch of ``--batch-size`` samples every step (its own seed), so the ranks'
gradients differ as in data-parallel training. From the same start, in the
same processes, one after the other, with SGD (momentum 0.9):

- **none**: ``DistributedOptimizer`` averaging whole gradients;
- **fp16**: ``Compression.fp16`` (half the bytes);
- **powersgd rank R**: ``PowerSGD(rank=R, warmup_steps=W)``.

Printed on rank 0: the bytes one rank hands the allreduce per step (after
PowerSGD's warm-up; a ring allreduce sends ``2 (n - 1) / n`` of that per
rank), their ratio to none, the median step time, and the global batch's
loss every few steps up to ``--loss-steps``.

Example::

    ringrun -np 2 python -m ring_strategy.bench.train --case compression --hidden 512 --layers 2
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any, Dict, List

__all__ = ["run"]

_LR, _MOMENTUM = 0.05, 0.9


def _setups(args: argparse.Namespace) -> Dict[str, Any]:
    import ring_strategy.torch as hvd

    return {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
            f"powersgd rank {args.powersgd_rank}": hvd.PowerSGD(rank=args.powersgd_rank,
                                                                warmup_steps=args.powersgd_warmup)}


def _batch(step: int, teacher: Any, args: argparse.Namespace) -> Any:
    import torch

    import ring_strategy as rs

    g = torch.Generator().manual_seed(1_000_003 * (step + 1) + rs.rank())
    x = torch.randn(args.batch_size, args.input, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def _train(compression: Any, template: Any, teacher: Any, args: argparse.Namespace) -> Dict[str, Any]:
    """One setup from ``template``: its losses, bytes per step and step times."""
    import torch
    import torch.nn.functional as F

    import ring_strategy.torch as hvd

    model = copy.deepcopy(template)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=_LR, momentum=_MOMENTUM),
                                         named_parameters=model.named_parameters(), compression=compression)
    dense = sum(p.numel() * p.element_size() for p in model.parameters())
    reducer = optimizer._sync._reducer
    losses: List[float] = []
    seconds: List[float] = []
    sent = []
    for step in range(args.loss_steps):
        x, y = _batch(step, teacher, args)
        hvd.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        losses.append(float(hvd.allreduce(loss.detach(), name="bench.train.compression.loss")))
        sent.append(reducer.sent_bytes if hasattr(reducer, "sent_bytes") else
                    dense // 2 if compression is hvd.Compression.fp16 else dense)
    return {"losses": losses, "sent_bytes_per_step": sent[-1], "dense_bytes_per_step": dense,
            "step_s": statistics.median(seconds)}


def run(args: argparse.Namespace, template: Any) -> List[Dict[str, Any]]:
    """Trains every setup on every rank; returns, on rank 0, one result per setup (empty elsewhere)."""
    import torch

    import ring_strategy as rs

    teacher = torch.randn(args.input, args.classes, generator=torch.Generator().manual_seed(12345))
    results = []
    for name, compression in _setups(args).items():
        result = _train(compression, template, teacher, args)
        results.append({"framework": name, "ranks": rs.size(), **result})
    if rs.rank() == 0:
        _report(results, args)
    return results if rs.rank() == 0 else []


def _report(results: List[Dict[str, Any]], args: argparse.Namespace) -> None:
    n = results[0]["ranks"]
    print(f"# compression: SGD (lr {_LR}, momentum {_MOMENTUM}), {n} rank(s), batch {args.batch_size} per rank, "
          f"{args.loss_steps} steps; teacher-labelled synthetic data, fresh every step")
    print(f"# bytes/step = what one rank hands the allreduce per step (PowerSGD after its {args.powersgd_warmup} "
          f"warm-up steps); the ring sends {2 * (n - 1) / n:.2f}x that per rank")
    print(f"#{'setup':>19}  {'bytes/step':>12}  {'vs none':>8}  {'step s':>8}")
    for r in results:
        print(f"{r['framework']:>20}  {r['sent_bytes_per_step']:>12}  "
              f"{r['sent_bytes_per_step'] / r['dense_bytes_per_step']:>8.3f}  {r['step_s']:>8.4f}")
    every = max(1, args.loss_steps // 10)
    marks = sorted(set(list(range(0, args.loss_steps, every)) + [args.loss_steps - 1]))
    print("# loss of the global batch at step:")
    print(f"#{'step':>5}  " + "  ".join(f"{r['framework']:>18}" for r in results))
    for step in marks:
        print(f"{step:>6}  " + "  ".join(f"{r['losses'][step]:>18.4f}" for r in results))
