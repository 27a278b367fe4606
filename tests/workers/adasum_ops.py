"""op=Adasum on the numpy API, checked against tests/workers/adasum_reference.py.

Run under ringrun with the scenario names as arguments; prints
``<rank>: <name> ok`` per scenario (tests/test_adasum.py reads them).
Every rank builds every rank's inputs from seeds, so it can compute the
reference itself.
"""

from __future__ import annotations

import sys

import numpy as np

import ring_strategy as rs
from tests.workers.adasum_reference import adasum
from tests.workers.checks import close, raises, run_scenarios

# Element counts (odd, one, empty, larger) and magnitudes that differ per
# tensor, so one dot product over the fused buffer would give other results.
COUNTS = [7, 1, 0, 33, 1000, 5]
SCALES = [1.0, 1e-3, 1.0, 50.0, 0.1, 4.0]
TOL = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 1e-2}


def inputs(rank: int, t: int, dtype) -> np.ndarray:
    """Rank ``rank``'s tensor ``t``: a part shared by every rank (so the dot
    products are far from zero) plus a part of its own."""
    shared = np.random.default_rng(1000 + t).standard_normal(COUNTS[t])
    own = np.random.default_rng(rank * 100 + t).standard_normal(COUNTS[t])
    return (SCALES[t] * (shared + 0.7 * own)).astype(dtype)


def expect(t: int, dtype) -> np.ndarray:
    return adasum([inputs(r, t, dtype) for r in range(rs.size())], dtype)


def check(got, t: int, dtype, factor: float = 1.0) -> None:
    want = (factor * expect(t, dtype)).astype(dtype)
    scale = float(np.abs(want).max()) if want.size else 1.0
    close(got, want, f"tensor {t} {np.dtype(dtype).name}", rtol=TOL[dtype], atol=TOL[dtype] * scale)


def fused() -> None:
    """Several tensors in flight together (one fused step), each with its own scalars."""
    for dtype in (np.float32, np.float64, np.float16):
        handles = [rs.allreduce_async(inputs(rs.rank(), t, dtype), op=rs.Adasum, name=f"fused.{t}")
                   for t in range(len(COUNTS))]
        for t, h in enumerate(handles):
            check(rs.synchronize(h), t, dtype)


def single() -> None:
    """One tensor at a time, synchronous; and into ``out=``."""
    for t in (0, 4):
        check(rs.allreduce(inputs(rs.rank(), t, np.float32), op=rs.Adasum), t, np.float32)
    x = inputs(rs.rank(), 3, np.float64)
    rs.allreduce(x, op=rs.Adasum, out=x)
    check(x, 3, np.float64)


def scaled() -> None:
    """prescale and postscale multiply as for the other ops (Adasum is homogeneous)."""
    got = rs.allreduce(inputs(rs.rank(), 4, np.float64), op=rs.Adasum, prescale_factor=2.0, postscale_factor=0.25)
    check(got, 4, np.float64, factor=0.5)


def zeros() -> None:
    """A rank with a zero tensor adds nothing; all zero gives zero."""
    n, r = rs.size(), rs.rank()
    x = np.arange(1, 6, dtype=np.float32) * (r + 1) if r % 2 == 0 else np.zeros(5, np.float32)
    want = adasum([np.arange(1, 6, dtype=np.float32) * (i + 1) if i % 2 == 0 else np.zeros(5) for i in range(n)])
    close(rs.allreduce(x, op=rs.Adasum), want.astype(np.float32), "zeros", rtol=1e-6)
    close(rs.allreduce(np.zeros(3, np.float32), op=rs.Adasum), np.zeros(3, np.float32), "all zero")


def same_everywhere() -> None:
    """Equal inputs on every rank: Adasum of n copies of x is x (each pair gives x)."""
    x = np.linspace(-1, 1, 9)
    close(rs.allreduce(x, op=rs.Adasum), x, "copies", rtol=1e-12)


def errors() -> None:
    """Integer tensors and reducescatter: BadArgumentError on every rank; the job goes on."""
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.ones(4, np.int32), op=rs.Adasum), "floating-point", "int32")
    raises(rs.BadArgumentError, lambda: rs.reducescatter(np.ones((4, 2), np.float32), op=rs.Adasum),
           "allreduce only")
    assert rs.allreduce(np.ones(1, np.float32), op=rs.Sum)[0] == rs.size()


def unsupported_size() -> None:
    """A world that is not a power of two: BadArgumentError naming the sizes, on every rank."""
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.ones(4, np.float32), op=rs.Adasum),
           "power-of-two", "1, 2, 4, 8", f"this job has {rs.size()}")
    assert rs.allreduce(np.ones(1, np.float32), op=rs.Sum)[0] == rs.size()


SCENARIOS = {f.__name__: f for f in (fused, single, scaled, zeros, same_everywhere, errors, unsupported_size)}

if __name__ == "__main__":
    rs.init()
    ok = run_scenarios(SCENARIOS, sys.argv[1:], rs.rank())
    rs.shutdown()
    sys.exit(0 if ok else 1)
