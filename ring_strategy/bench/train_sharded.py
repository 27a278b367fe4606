"""``bench.train --case optimizer-state``: Adam's state memory and step time, sharded against unsharded.

Three setups train the same MLP with Adam on the same synthetic batch, one
after the other in the same processes (each is built, measured and freed
before the next, so that each has the process's memory to itself):

- **ring**: ``DistributedOptimizer(Adam)``, every rank holding the whole state;
- **ring sharded**: ``DistributedOptimizer(Adam, shard_optimizer_state=True)``;
- **torch ZeRO (gloo)**: torch's ``ZeroRedundancyOptimizer(Adam)`` under
  ``DistributedDataParallel`` over gloo.

For each, per rank: the bytes of the optimizer's state tensors (Adam's two
moments and its step counters) after the steps, and the peak resident set
size while the setup was built and trained (``VmHWM`` of
``/proc/self/status``, reset through ``/proc/self/clear_refs`` before each
setup; it includes the interpreter, torch and the model). Step time: the
median over ``--rounds`` rounds of ``--steps`` steps of the slowest rank,
after ``--warmup`` untimed steps. Only rank 0 prints.

Example::

    ringrun -np 4 python -m ring_strategy.bench.train --case optimizer-state --hidden 4900 --layers 2
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

__all__ = ["run", "state_bytes", "peak_rss_bytes"]

Build = Callable[[Any], Tuple[Any, Any]]  # template model -> (model to train, optimizer)
_LR = 1e-4


def state_bytes(optimizer: Any) -> int:
    """Bytes of every tensor in ``optimizer.state`` (the local optimizer's, for ZeRO)."""
    import torch

    state = getattr(optimizer, "optim", optimizer).state
    return sum(v.numel() * v.element_size() for entries in state.values() for v in entries.values()
               if torch.is_tensor(v))


def _reset_peak_rss() -> bool:
    """Resets this process's peak RSS (Linux's VmHWM); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident set size since the last reset (0 where unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _ring(shard: bool) -> Build:
    def build(template: Any) -> Tuple[Any, Any]:
        import torch

        import ring_strategy.torch as hvd

        model = copy.deepcopy(template)
        optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=_LR),
                                             named_parameters=model.named_parameters(), shard_optimizer_state=shard)
        return model, optimizer

    return build


def _zero(template: Any) -> Tuple[Any, Any]:
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(copy.deepcopy(template))
    return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=_LR)


def _measure(build: Build, template: Any, data: Any, target: Any, args: argparse.Namespace) -> Dict[str, Any]:
    """One setup: build it, train it, and return this rank's figures."""
    import torch.nn.functional as F

    import ring_strategy as rs

    gc.collect()
    rs.barrier()
    exact = _reset_peak_rss()
    model, optimizer = build(template)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    seconds: List[float] = []
    for _ in range(args.rounds):
        rs.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        elapsed = (time.perf_counter() - start) / args.steps
        seconds.append(float(rs.allreduce(np.array([elapsed]), op=rs.Max, name="bench.train.state.time")[0]))
    figures = {"state_bytes": state_bytes(optimizer), "peak_rss_bytes": peak_rss_bytes() if exact else 0,
               "step_s": statistics.median(seconds)}
    del model, optimizer, step
    gc.collect()
    return figures


def run(args: argparse.Namespace, template: Any, data: Any, target: Any) -> List[Dict[str, Any]]:
    """Measures the three setups on every rank; returns, on rank 0, one
    result per setup with every rank's figures (empty elsewhere)."""
    import ring_strategy as rs
    from ring_strategy.bench.gloo import init_gloo

    init_gloo()
    setups = {"ring": _ring(False), "ring sharded": _ring(True), "torch ZeRO (gloo)": _zero}
    results = []
    for name, build in setups.items():
        mine = _measure(build, template, data, target, args)
        every = rs.allgather_object(mine, name=f"bench.train.state.{name}")
        results.append({"framework": name, "ranks": rs.size(), "step_s": every[0]["step_s"],
                        "state_bytes": [r["state_bytes"] for r in every],
                        "peak_rss_bytes": [r["peak_rss_bytes"] for r in every]})
    if rs.rank() == 0:
        _report(results, args)
    return results if rs.rank() == 0 else []


def _report(results: List[Dict[str, Any]], args: argparse.Namespace) -> None:
    n = results[0]["ranks"]
    print(f"# optimizer state: Adam, {n} rank(s), batch {args.batch_size} per rank, {args.threads} thread(s) "
          f"per rank; step = median of {args.rounds} round(s) of {args.steps} step(s), slowest rank")
    print("# state = bytes of the optimizer's state tensors per rank; peak RSS = the rank's VmHWM while the "
          "setup was built and trained (interpreter, torch and model included)")
    print(f"#{'setup':>19}  {'state/rank MB':>14}  {'peak RSS/rank MB':>17}  {'step s':>8}  {'vs ring':>8}")
    base = results[0]["step_s"]
    for r in results:
        state = [b / 1e6 for b in r["state_bytes"]]
        rss = [b / 1e6 for b in r["peak_rss_bytes"]]
        state_text = f"{max(state):.1f}" if max(state) - min(state) < 0.05 else f"{min(state):.1f}-{max(state):.1f}"
        rss_text = f"{min(rss):.0f}-{max(rss):.0f}" if max(rss) else "-"
        print(f"{r['framework']:>20}  {state_text:>14}  {rss_text:>17}  {r['step_s']:>8.3f}  "
              f"{r['step_s'] / base:>7.2f}x")
