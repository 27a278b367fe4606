"""Grouped submission (one engine call for a group of tensors) on real
ranks: ``python grouped.py SCENARIO...``. Each scenario prints
``<rank>: <scenario> ok`` when its checks pass on this rank.

The groups go through ``Runtime.enqueue_group`` and
``Runtime.wait_release_group`` (native/bindings/module.cc), behind the
numpy core's ``grouped_allreduce``, torch's grouped allreduces (and the
DistributedOptimizer's grouped path) and TensorFlow's ``grouped_allreduce``.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

import ring_strategy as rs
from ring_strategy._core import engine
from tests.workers.checks import equal, raises, run_scenarios

# One tensor of every engine dtype, rank-dependent values; Sum of every rank's.
DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]


def _tensor(dtype: str, rank: int, length: int) -> np.ndarray:
    if dtype == "bool":
        return np.arange(length) % (rank + 2) == 0
    kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return ((np.arange(length) + rank) % 7).astype(kind)


def _summed(dtype: str, length: int) -> np.ndarray:
    parts = [_tensor(dtype, r, length) for r in range(rs.size())]
    if dtype == "bool":
        return np.logical_or.reduce(parts)
    return np.sum(np.stack(parts).astype(np.float64), axis=0).astype(parts[0].dtype)


def mixed_dtypes() -> None:
    """One group holding every dtype (and a 0-d and a 2-d tensor) reduces each correctly."""
    me = rs.rank()
    xs = [_tensor(d, me, 5 + i) for i, d in enumerate(DTYPES)]
    xs += [np.float32(me + 1.5) * np.ones((), np.float32), np.full((2, 3), me, np.int32)]
    outs = rs.grouped_allreduce(xs, op=rs.Sum, name="mixed")
    assert len(outs) == len(xs)
    for i, d in enumerate(DTYPES):
        equal(outs[i], _summed(d, 5 + i), d)
    n = rs.size()
    equal(outs[-2], np.float32(n * (n + 2) / 2) * np.ones((), np.float32), "0-d")
    equal(outs[-1], np.full((2, 3), n * (n - 1) // 2, np.int32), "2-d")
    assert rs.grouped_allreduce([], name="empty") == []


def _bad_group(op: int) -> list:
    """A float32 member, then one the engine refuses with ``op``."""
    return [np.ones(4, np.float32), np.ones(4, np.int32 if op == rs.Adasum else bool)]


def bad_member() -> None:
    """A member the engine refuses raises BadArgumentError naming it, on every
    rank, and nothing of the group is queued: the same names go through next."""
    for op, why in [(rs.Adasum, "needs a floating-point tensor"), (rs.Average, "bool tensors support")]:
        raises(rs.BadArgumentError, lambda: rs.grouped_allreduce(_bad_group(op), op=op, name="bad"),
               "tensor 'bad.1'", why)
        raises(rs.BadArgumentError, lambda: rs.grouped_allreduce_async(_bad_group(op), op=op, name="bad"),
               "tensor 'bad.1'")
    # A name twice in one group, through the front end's engine call.
    x, out = np.ones(2, np.float32), np.empty(2, np.float32)
    f32 = engine.DTYPES["float32"]
    raises(rs.BadArgumentError, lambda: engine.enqueue_group(engine.ALLREDUCE, ["dup", "dup"], [x, x],
                                                                [out, out.copy()], [f32, f32]),
           "'dup' appears twice in one group")
    # The engine call itself refuses what the buffer protocol cannot give it:
    # a non-contiguous input, a read-only output (numpy arrays are read
    # without a DLPack export), naming the member.
    strided, frozen = np.ones(8, np.float32)[::2], np.empty(4, np.float32)
    frozen.flags.writeable = False
    raises(rs.BadArgumentError, lambda: engine.enqueue_group(engine.ALLREDUCE, ["ok", "strided"], [x, strided],
                                                                [out, None], [f32, f32]),
           "input of tensor 'strided' should be a C-contiguous array")
    raises(rs.BadArgumentError, lambda: engine.enqueue_group(engine.ALLREDUCE, ["ok", "frozen"],
                                                                [x, np.ones(4, np.float32)], [out, frozen],
                                                                [f32, f32]),
           "output of tensor 'frozen'")
    # Host memory described as (address, nbytes, shape), as the torch front
    # end hands CPU tensors over: a malformed description, or bytes that do
    # not fit the shape and dtype, are refused naming the member.
    span = (x.ctypes.data, x.nbytes, x.shape)
    for bad, why in [((x.ctypes.data, -1, x.shape), "should be (address, nbytes, shape)"),
                     ((0, 8, x.shape), "should be (address, nbytes, shape)"),
                     ((x.ctypes.data, 8, "2"), "should be (address, nbytes, shape)"),
                     ((x.ctypes.data, 4, x.shape), "has 4 bytes")]:
        raises(rs.BadArgumentError, lambda: engine.enqueue_group(engine.ALLREDUCE, ["ok", "span"], [span, bad],
                                                                    [out, None], [f32, f32]),
               "'span'", why)
    # Had "bad.0" or "dup" been queued, these would be refused (name in flight) or pair with it.
    n = rs.size()
    outs = rs.grouped_allreduce([np.ones(4, np.float32), np.ones(4, np.int32)], op=rs.Sum, name="bad")
    equal(outs[0], np.full(4, n, np.float32), "bad.0 again")
    equal(outs[1], np.full(4, n, np.int32), "bad.1 again")
    equal(rs.allreduce(x, op=rs.Sum, name="dup"), np.full(2, n, np.float32), "dup again")


def mismatch_member() -> None:
    """One member whose shape differs between ranks: synchronize raises
    MismatchError naming it on every rank, after releasing every member."""
    me = rs.rank()
    xs = [np.ones(3, np.float32), np.ones(3 + (me == rs.size() - 1), np.float32), np.ones(2)]
    h = rs.grouped_allreduce_async(xs, op=rs.Sum, name="mm")
    raises(rs.MismatchError, lambda: rs.synchronize(h), "'mm.1'")
    raises(rs.BadArgumentError, lambda: rs.synchronize(h), "already synchronized")
    outs = rs.grouped_allreduce([np.ones(3, np.float32)] * 3, op=rs.Sum, name="mm")  # every name is free again
    equal(outs[2], np.full(3, rs.size(), np.float32), "mm.2 again")


def _random_group(seed: int) -> list:
    rng = np.random.default_rng(seed)
    sizes = [1, 7, 1000, 4096, 33, 0, 257]
    return [rng.standard_normal(s).astype(np.float32) for s in sizes] + [rng.standard_normal(64)]


def bitwise_numpy() -> None:
    """Grouped results equal the per-tensor path's bit for bit (Average with scale factors)."""
    xs = _random_group(rs.rank())
    for step in range(2):  # the second step through the response cache
        kw = dict(op=rs.Average, prescale_factor=0.5, postscale_factor=3.0)
        handles = [rs.allreduce_async(x, name=f"one.{i}", **kw) for i, x in enumerate(xs)]
        singles = [rs.synchronize(h) for h in handles]
        grouped = rs.synchronize(rs.grouped_allreduce_async(xs, name="grp", **kw))
        outs = [np.full_like(x, 7) for x in xs]
        into = rs.grouped_allreduce(xs, name="grp.out", out=outs, **kw)  # into arrays made beforehand
        inplace = [x.copy() for x in xs]
        rs.grouped_allreduce(inplace, name="grp.inplace", out=inplace, **kw)
        assert all(a is b for a, b in zip(into, outs))
        for results in (grouped, outs, inplace):
            for i, (a, b) in enumerate(zip(singles, results)):
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (step, i)
    for bad in ([np.empty(3, np.float32)], [np.empty_like(x) for x in xs[:-1]] + [np.empty(64, np.float32)]):
        try:
            rs.grouped_allreduce(xs, name="grp.bad", out=bad)
        except rs.BadArgumentError:
            continue
        raise AssertionError("a bad out list was accepted")


def overlapping_memory() -> None:
    """Tensors whose memory overlaps in a group (one array twice, in place; two arrays swapping
    roles) get the results separate arrays would: the engine stages such a group through its
    fusion buffer instead of reducing in the tensors."""
    x = _random_group(rs.rank())[2]
    y = _random_group(rs.rank() + 10)[2]
    want_x, want_y = rs.allreduce(x, op=rs.Sum, name="ov.x"), rs.allreduce(y, op=rs.Sum, name="ov.y")
    a = x.copy()
    rs.grouped_allreduce([a, a], op=rs.Sum, name="ov.twice", out=[a, a])
    assert a.tobytes() == want_x.tobytes()
    a, b = x.copy(), y.copy()
    rs.grouped_allreduce([a, b], op=rs.Sum, name="ov.swap", out=[b, a])  # each output is the other's input
    assert b.tobytes() == want_x.tobytes() and a.tobytes() == want_y.tobytes()
    c = np.concatenate([x, y])
    first, second = c[: len(x)], c[len(x) - 3:]  # overlapping views
    got = rs.grouped_allreduce([first.copy(), second.copy()], op=rs.Sum, name="ov.views", out=[first, second])
    assert got[1].tobytes() == rs.allreduce(np.concatenate([x, y])[len(x) - 3:], op=rs.Sum, name="ov.v").tobytes()


def bitwise_torch() -> None:
    """torch: grouped (in place and not) equal per-tensor results bit for bit;
    a member the engine refuses raises and queues nothing."""
    import torch

    import ring_strategy.torch as hvd

    xs = [torch.from_numpy(x) for x in _random_group(rs.rank() + 10)]
    singles = [hvd.synchronize(hvd.allreduce_async(x, name=f"t.one.{i}", op=hvd.Average)) for i, x in enumerate(xs)]
    grouped = hvd.grouped_allreduce(xs, name="t.grp", op=hvd.Average)
    copies = [x.clone() for x in xs]
    inplace = hvd.synchronize(hvd.grouped_allreduce_async_(copies, name="t.grp_", op=hvd.Average))
    assert all(a is b for a, b in zip(inplace, copies))
    for i, (a, b, c) in enumerate(zip(singles, grouped, inplace)):
        assert a.numpy().tobytes() == b.numpy().tobytes() == c.numpy().tobytes(), i
    bad = [torch.ones(4), torch.ones(4, dtype=torch.int32)]
    raises(rs.BadArgumentError, lambda: hvd.grouped_allreduce_async(bad, name="t.bad", op=hvd.Adasum), "'t.bad.1'")
    equal(hvd.grouped_allreduce(bad, name="t.bad", op=hvd.Sum)[0], torch.full((4,), float(rs.size())), "t.bad again")


def bitwise_tensorflow() -> None:
    """TensorFlow's grouped_allreduce (eager and in a tf.function) equals its per-tensor allreduce bit for bit."""
    import tensorflow as tf

    import ring_strategy.tensorflow as hvd

    xs = [tf.constant(x) for x in _random_group(rs.rank() + 20)]
    singles = [hvd.allreduce(x, op=hvd.Average, name=f"tf.one.{i}") for i, x in enumerate(xs)]
    grouped = hvd.grouped_allreduce(xs, op=hvd.Average, name="tf.grp")
    traced = tf.function(lambda *ts: hvd.grouped_allreduce(list(ts), op=hvd.Average, name="tf.fn"))(*xs)
    for i, (a, b, c) in enumerate(zip(singles, grouped, traced)):
        assert a.numpy().tobytes() == b.numpy().tobytes() == c.numpy().tobytes(), i


SCENARIOS = {f.__name__: f for f in [mixed_dtypes, bad_member, mismatch_member, bitwise_numpy, overlapping_memory,
                                     bitwise_torch,
                                     bitwise_tensorflow]}


def main() -> None:
    rs.init()
    run_scenarios(SCENARIOS, [a for a in sys.argv[1:] if a in SCENARIOS], rs.rank(), stop_at_failure=True,
                  after_each=rs.barrier)
    rs.shutdown()


if __name__ == "__main__":
    main()
