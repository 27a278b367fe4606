"""What writing the timeline costs a training step.

``ringrun -np 2 python -m ring_strategy.bench.timeline_overhead`` runs the
small-tensors step (200 allreduces of 16 KiB, then a wait for all) in
pairs of rounds, one with the timeline off and one with it on
(``start_timeline`` / ``stop_timeline`` between rounds, so both see the same
machine), and prints the median step time of each and the overhead in
percent: the median over the pairs of the on / off ratio, with its 95%
confidence interval (the machine's noise: a shared host varies by several
percent from round to round).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import ring_strategy as rs
from ring_strategy.timeline import start_timeline, stop_timeline


def _step(tensors: List[np.ndarray], names: List[str]) -> None:
    handles = [rs.allreduce_async(t, op=rs.Sum, name=nm) for t, nm in zip(tensors, names)]
    for h in handles:
        rs.synchronize(h)


def _round(tensors: List[np.ndarray], names: List[str], steps: int, path: Optional[str]) -> Tuple[float, int]:
    """Seconds per step of one round with the timeline written to ``path``
    (None: off), and the bytes written there (0 on ranks that write none).
    A round with the timeline counts its start and its stop, which writes
    out what the round recorded: all it costs is in the time."""
    rs.barrier()
    t0 = time.perf_counter()
    if path is not None:
        start_timeline(path)
    for _ in range(steps):
        _step(tensors, names)
    if path is not None:
        stop_timeline()
    seconds = (time.perf_counter() - t0) / steps
    written = 0
    if path is not None and os.path.exists(path):
        # The next round writes a new file instead of truncating this one
        # (which costs the file system more than writing it did).
        written = os.path.getsize(path)
        os.remove(path)
    return seconds, written


def measure(num_tensors: int, tensor_bytes: int, steps: int, rounds: int, path: str) -> Dict[str, float]:
    """Step seconds with the timeline off and on, and their ratio (every
    rank calls it).

    Rounds come in pairs, off then on or on then off in turn; the ratio is
    the median over the pairs of on / off, so that a machine whose speed
    drifts during the run compares each round with its neighbour only. Short
    rounds and many pairs keep the neighbours close in time.
    """
    tensors = [np.ones(max(1, tensor_bytes // 4), np.float32) for _ in range(num_tensors)]
    names = [f"timeline_overhead.{i}" for i in range(num_tensors)]
    for _ in range(3):
        _step(tensors, names)
    off: List[float] = []
    on: List[float] = []
    written = 0
    for pair in range(rounds):
        for timeline in ((False, True) if pair % 2 == 0 else (True, False)):
            seconds, size = _round(tensors, names, steps, path if timeline else None)
            (on if timeline else off).append(seconds)
            written = max(written, size)
    ratios = np.array([b / a for a, b in zip(off, on)])
    q1, ratio, q3 = np.percentile(ratios, [25, 50, 75])
    low, high = _median_interval(ratios)
    return {"off": float(np.median(off)), "on": float(np.median(on)), "ratio": float(ratio),
            "ratio_q1": float(q1), "ratio_q3": float(q3), "ratio_low": low, "ratio_high": high,
            "bytes_per_step": written / steps}


def _median_interval(ratios: np.ndarray, resamples: int = 2000) -> Tuple[float, float]:
    """95% confidence interval of the median ratio: the pairs resampled with
    replacement (a bootstrap), with a fixed seed so a run can be repeated."""
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(ratios, size=(resamples, len(ratios)), replace=True), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the measurement and prints it on rank 0."""
    parser = argparse.ArgumentParser(prog="python -m ring_strategy.bench.timeline_overhead", description=__doc__)
    parser.add_argument("--num-tensors", type=int, default=200)
    parser.add_argument("--tensor-bytes", type=int, default=16 << 10)
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=300, help="pairs of rounds, one off and one on")
    args = parser.parse_args(argv)
    rs.init()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        result = measure(args.num_tensors, args.tensor_bytes, args.steps, args.rounds, path)
    if rs.rank() == 0:
        off, on = result["off"], result["on"]
        print(f"# {rs.size()} rank(s), {args.num_tensors} x {args.tensor_bytes} B allreduces per step, "
              f"{args.rounds} pairs of rounds of {args.steps} steps")
        print(f"timeline off: {off * 1e3:.3f} ms/step (median of the rounds; a round with the timeline "
              f"includes its start and its stop)")
        print(f"timeline on:  {on * 1e3:.3f} ms/step ({result['bytes_per_step'] / 1024:.0f} KiB written per step)")
        pct = {key: 100 * (value - 1) for key, value in result.items() if key.startswith("ratio")}
        print(f"overhead: {pct['ratio']:+.1f}% (median over the pairs of on / off; 95% confidence interval "
              f"{pct['ratio_low']:+.1f}% to {pct['ratio_high']:+.1f}%; quartiles {pct['ratio_q1']:+.1f}% and "
              f"{pct['ratio_q3']:+.1f}%)")
    rs.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
