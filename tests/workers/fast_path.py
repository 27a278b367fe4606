"""The fast path for agreed cached allreduces (RING_FAST_PATH=1,
native/engine/fast_path.h) on real ranks: ``python fast_path.py SCENARIO...``.
Each scenario prints ``<rank>: <scenario> ok`` when its checks pass here.

Every scenario repeats its tensors under the same names, so that after the
first (negotiated, cached) and second steps they take the fast path, and
checks every result against numpy exactly (small whole numbers). The test
reads the engine's trace log to count what still went through rank 0.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

import ring_strategy as rs
from ring_strategy import timeline as tl
from tests.workers.checks import close, equal, run_scenarios

LOOP_STEPS = 40


def _values(dtype: str, rank: int, step: int, length: int) -> np.ndarray:
    if dtype == "bool":
        return (np.arange(length) + rank + step) % 3 == 0
    kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return ((np.arange(length) + rank + step) % 4 + 1).astype(kind)


def _reduced(dtype: str, op: int, step: int, length: int) -> np.ndarray:
    parts = [_values(dtype, r, step, length).astype(np.float64) for r in range(rs.size())]
    if dtype == "bool":
        parts = [p.astype(bool) for p in parts]
        return np.logical_or.reduce(parts) if op in (rs.Sum, rs.Max) else np.logical_and.reduce(parts)
    fn = {rs.Sum: np.sum, rs.Average: np.mean, rs.Min: np.min, rs.Max: np.max, rs.Product: np.prod}[op]
    want = fn(np.stack(parts), axis=0)
    return want.astype(_values(dtype, 0, 0, 1).dtype)


def loop() -> None:
    """One small tensor, synchronously, LOOP_STEPS times (the test counts how
    many of them rank 0 negotiated)."""
    buf = np.zeros(1, np.float32)
    for step in range(LOOP_STEPS):
        buf[0] = rs.rank() + step
        rs.allreduce(buf, op=rs.Sum, name="fp.loop", out=buf)
        equal(buf, np.array([sum(r + step for r in range(rs.size()))], np.float32), ("loop", step))


def values() -> None:
    """Every dtype and reduce op, scale factors, in place, into out= and
    into a new array, a 0-d and an empty tensor, three steps each."""
    cases = [(d, rs.Sum) for d in ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]]
    cases += [("float32", rs.Average), ("float64", rs.Average), ("int32", rs.Min), ("int32", rs.Max),
              ("int16", rs.Product), ("bool", rs.Min)]
    for step in range(3):
        for i, (dtype, op) in enumerate(cases):
            x = _values(dtype, rs.rank(), step, 5 + i)
            got, want = rs.allreduce(x, op=op, name=f"fp.v{i}"), _reduced(dtype, op, step, 5 + i)
            # Average multiplies by 1/n, as the ring does: within a rounding of numpy's division.
            (close if op == rs.Average else equal)(got, want, (dtype, op, step))
        x = _values("float32", rs.rank(), step, 6)
        rs.allreduce(x, op=rs.Sum, name="fp.inplace", out=x)
        equal(x, _reduced("float32", rs.Sum, step, 6), ("in place", step))
        out = np.empty(6, np.float32)
        got = rs.allreduce(_values("float32", rs.rank(), step, 6), op=rs.Sum, name="fp.out", out=out,
                           prescale_factor=2.0, postscale_factor=0.5)
        equal(got, _reduced("float32", rs.Sum, step, 6), ("scaled", step))
        equal(rs.allreduce(np.float32(rs.rank() + step), op=rs.Sum, name="fp.0d"),
              np.float32(sum(r + step for r in range(rs.size()))), ("0-d", step))
        equal(rs.allreduce(np.zeros(0, np.float32), op=rs.Sum, name="fp.empty"), np.zeros(0, np.float32))


def changes() -> None:
    """A cached name whose shape, dtype and op change (on every rank at once)
    runs each new request right, then takes the fast path again."""
    plan = [("float32", rs.Sum, 4)] * 3 + [("float32", rs.Sum, 7)] * 3 + [("int32", rs.Sum, 7)] * 3
    plan += [("int32", rs.Max, 7)] * 3 + [("float32", rs.Sum, 4)] * 2
    for step, (dtype, op, length) in enumerate(plan):
        x = _values(dtype, rs.rank(), step, length)
        equal(rs.allreduce(x, op=op, name="fp.change"), _reduced(dtype, op, step, length), (dtype, op, length))


def late_rank() -> None:
    """Rank 0 submits late (past the fast path's patience): the others'
    held tensors go back to the negotiation and still reduce right."""
    for step in range(5):
        if rs.rank() == 0 and step in (2, 3):
            time.sleep(0.15)
        x = _values("float32", rs.rank(), step, 3)
        equal(rs.allreduce(x, op=rs.Sum, name="fp.late"), _reduced("float32", rs.Sum, step, 3), ("late", step))


def async_and_grouped() -> None:
    """Many small asynchronous allreduces in flight and a grouped one."""
    for step in range(4):
        xs = [_values("float32", rs.rank(), step + i, 16) for i in range(12)]
        handles = [rs.allreduce_async(x, op=rs.Sum, name=f"fp.a{i}") for i, x in enumerate(xs)]
        for i, h in enumerate(handles):
            equal(rs.synchronize(h), _reduced("float32", rs.Sum, step + i, 16), ("async", step, i))
        outs = rs.grouped_allreduce([_values("int32", rs.rank(), step, 3 + i) for i in range(3)], op=rs.Sum,
                                    name="fp.g")
        for i, o in enumerate(outs):
            equal(o, _reduced("int32", rs.Sum, step, 3 + i), ("grouped", step, i))


def process_set() -> None:
    """Allreduces of a set of ranks 0 and 1 (0 alone on two ranks) beside
    the global set's fast ones."""
    members = [0, 1] if rs.size() > 2 else [0]
    pair = rs.add_process_set(members)
    for step in range(4):
        x = _values("float32", rs.rank(), step, 4)
        equal(rs.allreduce(x, op=rs.Sum, name="fp.world"), _reduced("float32", rs.Sum, step, 4), ("world", step))
        if rs.rank() in members:
            got = rs.allreduce(x, op=rs.Sum, name="fp.pair", process_set=pair)
            want = sum(_values("float32", r, step, 4) for r in members)
            equal(got, want, ("pair", step))
    rs.remove_process_set(pair)


def timeline() -> None:
    """While rank 0 records a timeline, cached tensors are negotiated (the
    test finds them in the trace)."""
    for step in range(3):
        rs.allreduce(np.ones(2, np.float32), op=rs.Sum, name="fp.tl")
    tl.start_timeline(sys.argv[1])
    for step in range(3):
        equal(rs.allreduce(np.ones(2, np.float32), op=rs.Sum, name="fp.tl"), np.full(2, rs.size(), np.float32))
    tl.stop_timeline()
    rs.barrier()


BITS_STEPS = 4  # the test counts how many of them rank 0 negotiated


def _bits_cases(rank: int):
    """(name, array, op): values whose reduction depends on its order,
    different on every rank: floats of mixed magnitudes and signs, and for
    Min and Max signed zeros and NaNs with payloads."""
    rng = np.random.default_rng(1000 + rank)
    mixed = rng.standard_normal(37) * 10.0 ** rng.integers(-6, 7, 37)
    zeros = np.where(rng.random(37) < 0.5, 0.0, -0.0).astype(np.float32)
    nans = zeros.copy()
    nans.view(np.uint32)[::5] = 0x7FC00000 | (rank + 1)  # a NaN per rank, payload rank + 1
    cases = [(f"{d}.{op}", mixed.astype(ml_dtypes.bfloat16 if d == "bfloat16" else d), op)
             for d in ("float16", "bfloat16", "float32", "float64") for op in (rs.Sum, rs.Average, rs.Product)]
    cases += [("zeros.min", zeros, rs.Min), ("zeros.max", zeros, rs.Max), ("nans.min", nans, rs.Min),
              ("nans.max", nans, rs.Max)]
    return cases


def same_bits() -> None:
    """A tensor's bits do not depend on which way it went: the first step of
    each name is negotiated (the ring's reduction), the next ones take the
    fast path, and every step gives the first one's bytes exactly."""
    first = {}
    for step in range(BITS_STEPS):
        for name, x, op in _bits_cases(rs.rank()):
            got = rs.allreduce(x, op=op, name=f"fp.bits.{name}", prescale_factor=0.75, postscale_factor=1.5)
            seen = got.view(np.uint8).tobytes()
            first.setdefault(name, seen)
            assert seen == first[name], (name, step, got)


SCENARIOS = {f.__name__: f for f in (loop, values, changes, late_rank, async_and_grouped, process_set, timeline,
                                     same_bits)}


def main() -> None:
    rs.init()
    run_scenarios(SCENARIOS, sys.argv[2:], rs.rank())
    rs.shutdown()


if __name__ == "__main__":
    main()
