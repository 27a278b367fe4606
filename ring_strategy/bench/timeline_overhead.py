"""What writing the timeline costs a training step.

``ringrun -np 2 python -m ring_strategy.bench.timeline_overhead`` runs the
small-tensors step (200 allreduces of 16 KiB, then a wait for all) in
rounds that alternate between the timeline off and on (``start_timeline``
/ ``stop_timeline`` between rounds, so both see the same machine), and
prints the median step time of each and the overhead in percent.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

import ring_strategy as rs
from ring_strategy.timeline import start_timeline, stop_timeline


def _step(tensors: List[np.ndarray], names: List[str]) -> None:
    handles = [rs.allreduce_async(t, op=rs.Sum, name=nm) for t, nm in zip(tensors, names)]
    for h in handles:
        rs.synchronize(h)


def measure(num_tensors: int, tensor_bytes: int, steps: int, rounds: int, path: str) -> Dict[str, float]:
    """Median step seconds with the timeline off and on (every rank calls it)."""
    tensors = [np.ones(max(1, tensor_bytes // 4), np.float32) for _ in range(num_tensors)]
    names = [f"timeline_overhead.{i}" for i in range(num_tensors)]
    times: Dict[str, List[float]] = {"off": [], "on": []}
    for _ in range(3):
        _step(tensors, names)
    for r in range(2 * rounds):
        mode = "on" if r % 2 else "off"
        if mode == "on":
            start_timeline(path)
        rs.barrier()
        for _ in range(steps):
            t0 = time.perf_counter()
            _step(tensors, names)
            times[mode].append(time.perf_counter() - t0)
        if mode == "on":
            stop_timeline()
    return {mode: float(np.median(ts)) for mode, ts in times.items()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the measurement and prints it on rank 0."""
    parser = argparse.ArgumentParser(prog="python -m ring_strategy.bench.timeline_overhead", description=__doc__)
    parser.add_argument("--num-tensors", type=int, default=200)
    parser.add_argument("--tensor-bytes", type=int, default=16 << 10)
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds with the timeline off, and as many on")
    args = parser.parse_args(argv)
    rs.init()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        result = measure(args.num_tensors, args.tensor_bytes, args.steps, args.rounds, path)
        size = os.path.getsize(path) if rs.rank() == 0 else 0
    if rs.rank() == 0:
        off, on = result["off"], result["on"]
        print(f"# {rs.size()} rank(s), {args.num_tensors} x {args.tensor_bytes} B allreduces per step, "
              f"median of {args.steps * args.rounds} steps each")
        print(f"timeline off: {off * 1e3:.3f} ms/step")
        print(f"timeline on:  {on * 1e3:.3f} ms/step ({size / args.steps / args.rounds / 1024:.0f} KiB written per step)")
        print(f"overhead: {100 * (on / off - 1):+.1f}%")
    rs.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
