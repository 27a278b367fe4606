"""``python -m ring_strategy.bench.scaling``: the allreduce algorithms side
by side in one job, the alpha-beta model fitted to them, and its prediction
for large worlds (docs/scaling.md).

Usage::

    ringrun -np 8 -H a:2,b:2,c:2,d:2 python -m ring_strategy.bench.scaling \\
        --sizes 4,1K,16K,64K,256K,1M --json scaling.json

Every configuration of ``--configs`` runs in its own world: this process
sets its variables (``RING_ALLREDUCE_ALGORITHM``, and
``RING_HIERARCHICAL_ALLREDUCE``), calls ``init()``, times an in-place Sum
allreduce of float32 at each size (the median per-call time, then the
slowest rank's), and calls ``shutdown()``. Configurations:

- ``ring``, ``doubling``, ``halving-doubling``: that flat algorithm for
  every size (hierarchical allreduce off);
- ``hierarchical+ring``, ``hierarchical+tree``: the hierarchical allreduce,
  its cross-host stage by the ring, or in the tree order (doubling or
  halving-doubling by size);
- ``auto``: the engine's own choice with its defaults.

Rank 0 prints one row per size, one column per configuration, then the fit
of :mod:`ring_strategy.bench.alpha_beta` over every configuration except
``auto`` (with each point's error), then the model's times for 64, 256 and
1024 ranks of ``--predict-per-host`` per host, with the flat algorithm the
engine would pick (``_native.allreduce_algorithm``, the engine's rule).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Dict, List, Optional, Sequence

import numpy as np

import ring_strategy as rs
from ring_strategy import _native
from ring_strategy.bench import alpha_beta
from ring_strategy.bench.measure import time_calls
from ring_strategy.bench.sizes import format_size, parse_size_list

__all__ = ["CONFIGS", "main"]

#: Configuration name -> the variables its world starts with.
CONFIGS: Dict[str, Dict[str, str]] = {
    "ring": {"RING_ALLREDUCE_ALGORITHM": "ring", "RING_HIERARCHICAL_ALLREDUCE": "0"},
    "doubling": {"RING_ALLREDUCE_ALGORITHM": "doubling", "RING_HIERARCHICAL_ALLREDUCE": "0"},
    "halving-doubling": {"RING_ALLREDUCE_ALGORITHM": "halving-doubling", "RING_HIERARCHICAL_ALLREDUCE": "0"},
    "hierarchical+ring": {"RING_ALLREDUCE_ALGORITHM": "ring", "RING_HIERARCHICAL_ALLREDUCE": "1"},
    "hierarchical+tree": {"RING_ALLREDUCE_ALGORITHM": "tree", "RING_HIERARCHICAL_ALLREDUCE": "1"},
    "auto": {},
}
_MODEL_OF = {"hierarchical+tree": None, "auto": None}  # not one model each: left out of the fit
PREDICT_RANKS = (64, 256, 1024)
PREDICT_SIZES = (4, 64 << 10, 1 << 20, 64 << 20)


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ring_strategy.bench.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="ring,doubling,halving-doubling,auto",
                   help=f"comma-separated, of: {', '.join(CONFIGS)}")
    p.add_argument("--sizes", default="4,1K,16K,64K,256K,1M", help="bytes per allreduce, e.g. 4,64K,1M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--predict-per-host", type=int, default=8, help="ranks per host of the predicted worlds")
    p.add_argument("--json", default=None, help="write the measurements, fit and predictions there")
    args = p.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    args.sizes = parse_size_list(args.sizes)
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be at least 1 and --warmup at least 0")
    return args


def _measure(config: str, sizes: Sequence[int], iters: int, warmup: int) -> List[float]:
    """Seconds per allreduce at each size (slowest rank's median) in a world
    started with ``config``'s variables."""
    saved = {k: os.environ.get(k) for k in CONFIGS[config]}
    os.environ.update(CONFIGS[config])
    try:
        rs.init()
        medians = []
        for nbytes in sizes:
            buf = np.ones(max(1, nbytes // 4), np.float32)
            name = f"scaling.{nbytes}"
            call = lambda: rs.allreduce(buf, op=rs.Sum, name=name, out=buf)  # noqa: E731
            rs.barrier()
            time_calls(call, warmup)
            rs.barrier()
            medians.append(statistics.median(time_calls(call, iters)))
        slowest = rs.allreduce(np.array(medians), op=rs.Max, name="scaling.slowest")
        rs.shutdown()
        return [float(t) for t in slowest]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _engine_pick(n: int, per_host: int, nbytes: int) -> str:
    """What the engine runs for one tensor of ``nbytes`` alone, with its
    defaults: hierarchical with several ranks on each of several hosts."""
    hosts = n // per_host
    if per_host > 1 and hosts > 1:
        cross = _native.allreduce_algorithm("auto", hosts, False, nbytes // per_host)
        return "hierarchical+" + _short(cross)
    return _short(_native.allreduce_algorithm("auto", n, hosts == 1, nbytes))


def _short(phase: str) -> str:
    return {"RING_ALLREDUCE": "ring", "DOUBLING_ALLREDUCE": "doubling",
            "HALVING_DOUBLING_ALLREDUCE": "halving-doubling"}[phase]


def _report(args: argparse.Namespace, times: Dict[str, List[float]]) -> dict:
    n, per_host = rs.size(), rs.local_size()
    lines = [f"# ring_strategy.bench.scaling: {n} ranks, {per_host} per host; median us per allreduce "
             f"(slowest rank), {args.iters} calls after {args.warmup} warmup",
             "#" + "size".rjust(9) + "".join(c.rjust(19) for c in args.configs)]
    for i, nbytes in enumerate(args.sizes):
        lines.append(format_size(nbytes).rjust(10) + "".join(f"{times[c][i] * 1e6:19.1f}" for c in args.configs))
    points = [(c, n, per_host, m, times[c][i]) for c in args.configs if c not in _MODEL_OF
              for i, m in enumerate(args.sizes)]
    report = {"ranks": n, "per_host": per_host, "sizes": args.sizes, "times_s": times}
    if per_host == n:
        lines.append("# no fit: one host (the model counts the steps and bytes between hosts)")
    elif len(points) >= 2:
        alpha, beta, errors = alpha_beta.fit(points)
        report.update(alpha_s=alpha, beta_s_per_byte=beta, fit_errors=errors)
        rate = f" ({1 / beta / 1e9:.3f} GB/s)" if beta > 0 else ""
        lines.append(f"# fit over {len(points)} points: alpha = {alpha * 1e6:.1f} us per step between hosts, "
                     f"beta = {beta * 1e9:.3f} ns per byte{rate}; errors "
                     f"{min(errors) * 100:+.0f}% to {max(errors) * 100:+.0f}%")
        report["predictions"] = _predictions(alpha, beta, args.predict_per_host, lines)
    print("\n".join(lines), flush=True)
    return report


def _predictions(alpha: float, beta: float, per_host: int, lines: List[str]) -> list:
    algorithms = [*alpha_beta.FLAT, *(f"hierarchical+{a}" for a in alpha_beta.FLAT)]
    lines.append(f"# model, {per_host} ranks per host: us per allreduce of one tensor; picked = the engine's choice")
    lines.append("#" + "ranks".rjust(6) + "size".rjust(8) + "".join(a.rjust(27) for a in algorithms) + "   picked")
    out = []
    for n in PREDICT_RANKS:
        for nbytes in PREDICT_SIZES:
            model = {a: alpha_beta.predict(alpha, beta, a, n, per_host, nbytes) for a in algorithms}
            picked = _engine_pick(n, per_host, nbytes)
            lines.append(f"{n:7d}{format_size(nbytes):>8}" + "".join(f"{model[a] * 1e6:27.0f}" for a in algorithms)
                         + f"   {picked}")
            out.append({"ranks": n, "bytes": nbytes, "model_s": model, "picked": picked})
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse(argv)
    times = {c: _measure(c, args.sizes, args.iters, args.warmup) for c in args.configs}
    rs.init()  # one more world, for the report's sizes and the last word
    if rs.rank() == 0:
        report = _report(args, times)
        if args.json:
            with open(args.json, "w") as f:
                json.dump([report], f, indent=1)  # a list of objects, as every benchmark's --json
    rs.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
