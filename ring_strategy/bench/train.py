"""``python -m ring_strategy.bench.train``: training throughput, ring against DDP.

An MLP of about 10 M parameters (784-2048-2048-2048-10 by default) trains on
synthetic data with SGD, one thread per rank (``torch.set_num_threads(1)``),
so that every rank has a core of its own. Printed, on rank 0:

- **np=1**: samples/s of rank 0 running the same step *without any
  communication* (plain SGD on its own batch) while the other ranks wait idle
  in a barrier. That is one process with one thread on an otherwise quiet
  machine: the reference every speed-up is measured against. It is measured
  in the same run, round by round with the others, rather than in a
  separate ``ringrun -np 1`` job, so all numbers see the same machine and
  the same process state.
- **ring (SCHEDULE, auto)**: samples/s of all N ranks training together with
  ``ring_strategy.torch.DistributedOptimizer``, with the gradient schedule
  ``auto`` picks on this machine (:mod:`ring_strategy._schedule`); samples/s
  = N x batch x steps / the slowest rank's time.
- **ring (OTHER)**: the same with the other schedule forced
  (``RING_GRADIENT_SCHEDULE``), so both are shown.
- **ddp** (``--compare ddp``): the same with
  ``torch.nn.parallel.DistributedDataParallel`` over gloo, in the same
  processes. ring and DDP take turns round by round, separated by barriers.
- **np=N, no communication**: every rank runs the plain step at the same
  time, with no communication at all. Its efficiency is the ceiling for any
  library on this machine: ranks on one host share the memory system (and
  on a small machine the cores), so their compute slows each other down
  before a single byte is exchanged.
- **efficiency** = N-rank samples/s / (N x np=1 samples/s): 100% is perfect
  scaling.

Each figure is the median over ``--rounds`` rounds of ``--steps`` steps,
after ``--warmup`` untimed steps; every round measures each setup in turn.

``--case optimizer-state`` measures Adam's state memory and step time with
the sharded optimizer instead (:mod:`ring_strategy.bench.train_sharded`);
``--case compression`` the bytes sent per step and the loss curve with
PowerSGD and fp16 against none (:mod:`ring_strategy.bench.train_compression`).

Example::

    ringrun -np 2 python -m ring_strategy.bench.train --compare ddp
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ring_strategy.bench.options import _non_negative, _positive  # the CLI's argument checks

__all__ = ["build_parser", "build_model", "main"]

Step = Callable[[], None]
# What a run measures (--case).
CASES = ("throughput", "optimizer-state", "compression")
# Every rank runs the plain step at once: the ceiling of the efficiency.
NO_COMMUNICATION = "no communication"


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``python -m ring_strategy.bench.train``."""
    parser = argparse.ArgumentParser(
        prog="python -m ring_strategy.bench.train",
        description="Training throughput (samples/s) and scaling efficiency of an MLP on synthetic data, "
        "ring's DistributedOptimizer against DDP (gloo) in the same run. Only rank 0 prints.",
        epilog="Example: ringrun -np 2 python -m ring_strategy.bench.train --compare ddp",
    )
    parser.add_argument("--case", choices=CASES, default="throughput",
                        help="throughput: samples/s and efficiency (default); optimizer-state: Adam's state memory "
                        "and step time, sharded against unsharded and torch's ZeroRedundancyOptimizer "
                        "(ring_strategy/bench/train_sharded.py); compression: bytes sent per step and the loss "
                        "curve, PowerSGD and fp16 against none (ring_strategy/bench/train_compression.py)")
    parser.add_argument("--loss-steps", type=_positive, default=100,
                        help="--case compression: training steps per setup (default: 100)")
    parser.add_argument("--powersgd-rank", type=_positive, default=4,
                        help="--case compression: PowerSGD's rank (default: 4)")
    parser.add_argument("--powersgd-warmup", type=_non_negative, default=10,
                        help="--case compression: PowerSGD's uncompressed warm-up steps (default: 10)")
    parser.add_argument("--compare", choices=["ddp"], default=None, help="also measure DDP over gloo")
    parser.add_argument("--input", type=_positive, default=784, help="input features (default: 784)")
    parser.add_argument("--hidden", type=_positive, default=2048, help="width of the hidden layers (default: 2048)")
    parser.add_argument("--layers", type=_positive, default=3, help="hidden layers (default: 3)")
    parser.add_argument("--classes", type=_positive, default=10, help="outputs (default: 10)")
    parser.add_argument("--batch-size", type=_positive, default=64, help="samples per rank per step (default: 64)")
    parser.add_argument("--steps", type=_positive, default=10, help="timed steps per round (default: 10)")
    parser.add_argument("--warmup", type=_non_negative, default=3, help="untimed steps first (default: 3)")
    parser.add_argument("--rounds", type=_positive, default=5, help="rounds; the median is printed (default: 5)")
    parser.add_argument("--threads", type=_positive, default=1, help="torch threads per rank (default: 1)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results as JSON")
    return parser


def build_model(args: argparse.Namespace) -> Any:
    """The MLP: ``--layers`` hidden Linear+ReLU layers of ``--hidden`` units."""
    import torch.nn as nn

    widths = [args.input] + [args.hidden] * args.layers
    layers: List[Any] = []
    for inp, out in zip(widths, widths[1:]):
        layers += [nn.Linear(inp, out), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], args.classes))
    return nn.Sequential(*layers)


def _sgd_step(model: Any, optimizer: Any, data: Any, target: Any) -> Step:
    import torch.nn.functional as F

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    return step


def _time_steps(step: Step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def _slowest(seconds: float) -> float:
    import ring_strategy as rs

    return float(rs.allreduce(np.array([seconds]), op=rs.Max, name="bench.train.time")[0])


def _rates(steps: Dict[str, Step], local: Step, args: argparse.Namespace) -> Tuple[float, Dict[str, float]]:
    """Median samples/s of np=1 (rank 0 alone, the others waiting in a
    barrier) and of every library with all ranks training. Every round
    measures each of them in turn, so that all see the process and the
    machine in the same state (a process's first steps run slower)."""
    import ring_strategy as rs

    for step in [local, *steps.values()]:
        rs.barrier()
        _time_steps(step, args.warmup)
    local_rates: List[float] = []
    rates: Dict[str, List[float]] = {name: [] for name in steps}
    samples = rs.size() * args.batch_size * args.steps
    for _ in range(args.rounds):
        rs.barrier()
        if rs.rank() == 0:
            local_rates.append(args.batch_size * args.steps / _time_steps(local, args.steps))
        for name, step in steps.items():
            rs.barrier()
            rates[name].append(samples / _slowest(_time_steps(step, args.steps)))
    local_rate = statistics.median(local_rates) if local_rates else 0.0
    return local_rate, {name: statistics.median(values) for name, values in rates.items()}


def _plain_step(template: Any, data: Any, target: Any) -> Step:
    import torch

    model = copy.deepcopy(template)
    return _sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.01), data, target)


def _ring_step(template: Any, data: Any, target: Any, schedule: Optional[str] = None) -> Step:
    """A DistributedOptimizer step, with ``schedule`` forced as a user would
    (``RING_GRADIENT_SCHEDULE``) or, when None, the one ``auto`` picks."""
    import torch

    import ring_strategy.torch as hvd
    from ring_strategy._schedule import forced

    model = copy.deepcopy(template)
    with forced(schedule or "auto"):
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters(),
        )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return _sgd_step(model, optimizer, data, target)


def _ring_steps(template: Any, data: Any, target: Any) -> Dict[str, Step]:
    """``ring`` with the schedule auto picks, and ``ring (OTHER)`` with the other one."""
    from ring_strategy._schedule import AFTER_BACKWARD, OVERLAP, gradient_schedule

    picked = gradient_schedule("auto")
    other = OVERLAP if picked == AFTER_BACKWARD else AFTER_BACKWARD
    return {"ring": _ring_step(template, data, target), f"ring ({other})": _ring_step(template, data, target, other)}


def _ddp_step(template: Any, data: Any, target: Any) -> Step:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from ring_strategy.bench.gloo import init_gloo

    init_gloo()
    model = DistributedDataParallel(copy.deepcopy(template))  # broadcasts rank 0's weights
    return _sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.01), data, target)


def _report(args: argparse.Namespace, params: int, local: float, rates: Dict[str, float]) -> List[Dict[str, Any]]:
    import ring_strategy as rs

    n = rs.size()
    widths = "-".join(str(w) for w in [args.input] + [args.hidden] * args.layers + [args.classes])
    print(f"# ring_strategy.bench.train: MLP {widths} ({params / 1e6:.2f} M parameters), batch {args.batch_size} "
          f"per rank, {args.threads} thread(s) per rank, {n} rank(s)")
    print("# np=1: rank 0 alone runs the same step without communication while the other ranks wait idle")
    print(f"# np={n}: samples/s = {n} x {args.batch_size} x {args.steps} steps / the slowest rank's time; "
          f"median of {args.rounds} round(s) after {args.warmup} warmup steps; the libraries take turns")
    print(f"# efficiency = np={n} samples/s / ({n} x np=1 samples/s)")
    from ring_strategy._schedule import cpus_per_rank, gradient_schedule

    print(f"# ring: gradient schedule {gradient_schedule('auto')} (auto: {cpus_per_rank():g} CPUs "
          "per rank here; RING_GRADIENT_SCHEDULE forces one)")
    print(f"#{'setup':>27}  {'samples/s':>10}  {'efficiency':>10}")
    print(f"{'np=1, no communication':>28}  {local:>10.1f}  {'-':>10}")
    results = []
    for name, rate in rates.items():
        efficiency = rate / (n * local)
        print(f"{f'np={n}, {name}':>28}  {rate:>10.1f}  {100 * efficiency:>9.1f}%")
        framework = "none" if name == NO_COMMUNICATION else name
        results.append({"framework": framework, "ranks": n, "samples_per_s": rate, "efficiency": efficiency,
                        "np1_samples_per_s": local, "parameters": params, "batch_size": args.batch_size})
    if "ring" in rates and "ddp" in rates:
        print(f"# ring/ddp samples/s: {rates['ring'] / rates['ddp']:.2f}x")
    return results


def _end_without_destroying_gloo() -> None:
    """Ends this process once every rank is done, without destroying gloo.

    torch's gloo process group joins its worker threads when it is
    destroyed, with the GIL held by whoever drops the last reference (here
    the DDP model). A worker thread still letting go of a DDP allreduce
    takes the GIL to do so, because the work keeps the Python context that
    ``backward()`` stashes in thread-local state: the two threads then wait
    for each other forever. Nothing is left to do once every rank has passed
    the barrier, so the process shuts ring down, flushes its output and ends
    with gloo in place.
    """
    import ring_strategy as rs

    rs.barrier()
    rs.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the training benchmark; returns the exit status (0). With
    ``--compare ddp`` it ends the process instead of returning (see
    :func:`_end_without_destroying_gloo`).

    Raises:
        SystemExit: With status 2 for a bad option, before joining the job.
    """
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("torch") is None:
        sys.exit("ring_strategy.bench.train needs torch: pip install 'ring-strategy[torch]'")
    import torch

    import ring_strategy.torch as hvd

    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    template = build_model(args)
    params = sum(p.numel() for p in template.parameters())
    data = torch.randn(args.batch_size, args.input)
    target = torch.randint(0, args.classes, (args.batch_size,))
    if args.case != "throughput":
        return _other_case(args, params, template, data, target)
    steps = _ring_steps(template, data, target)
    if args.compare == "ddp":
        steps["ddp"] = _ddp_step(template, data, target)
    # One plain model serves np=1 (rank 0 alone) and every rank computing at once.
    plain = _plain_step(template, data, target)
    steps[NO_COMMUNICATION] = plain
    local, rates = _rates(steps, plain, args)
    if hvd.rank() == 0:
        results = _report(args, params, local, rates)
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.compare == "ddp":
        _end_without_destroying_gloo()
    hvd.barrier()
    return 0


def _other_case(args: argparse.Namespace, params: int, template: Any, data: Any, target: Any) -> int:
    """Runs ``--case`` other than throughput; ends the process (gloo stays, see
    :func:`_end_without_destroying_gloo`)."""
    import ring_strategy as rs
    from ring_strategy.bench import train_sharded

    if rs.rank() == 0:
        widths = "-".join(str(w) for w in [args.input] + [args.hidden] * args.layers + [args.classes])
        print(f"# ring_strategy.bench.train --case {args.case}: MLP {widths} ({params / 1e6:.2f} M parameters)")
    if args.case == "compression":
        from ring_strategy.bench import train_compression

        results = train_compression.run(args, template)
    else:
        results = train_sharded.run(args, template, data, target)
    for result in results:
        result["parameters"] = params
    if rs.rank() == 0 and args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    _end_without_destroying_gloo()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
