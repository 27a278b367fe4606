"""The front ends' shared core on real workers: `python frontend_core.py SCENARIO...`.

Runs under ringrun or alone (a world of one). Each scenario prints
"<rank>: <scenario> ok" when its checks pass; the first failure prints its
traceback and exits at once, so that no rank is left waiting on the others.

- world_numpy, world_torch: handles belong to the world they were made in.
  Rank 0 keeps an operation unsynchronized (in a world of two nobody matches
  it, so rank 0's automatic names run one ahead of rank 1's), every rank
  synchronizes another, then shutdown() and init(). The old handles raise a
  clear ShutdownError naming them, even though the new world's engine handle
  ids start again at 1, and automatic names start again on every rank (an
  unnamed collective matches across ranks).
- roots_numpy, roots_torch, roots_tensorflow: every front end takes the same
  root ranks (Python and numpy integers) and refuses the same ones.
"""

import os
import sys

import numpy as np

import ring_strategy as rs
from tests.workers.checks import raises, run_scenarios


def world_numpy():
    rs.init()
    n, me = rs.size(), rs.rank()
    kept = rs.allreduce_async(np.ones(3), op=rs.Sum) if me == 0 else None
    done = rs.allreduce_async(np.ones(3), op=rs.Sum, name="world1.done")
    assert rs.synchronize(done).tolist() == [n] * 3
    rs.shutdown()
    rs.init()
    new = rs.allreduce_async(np.full(3, 2.0), op=rs.Sum, name="world2.first")  # engine ids restart at 1
    for old in ([kept] if kept is not None else []) + [done]:
        number = repr(old)[len("Handle("):-1]
        raises(rs.ShutdownError, lambda: rs.poll(old), f"handle {number} ", "shutdown()")
        raises(rs.ShutdownError, lambda: rs.synchronize(old), f"handle {number} ", "shutdown()")
    assert rs.synchronize(new).tolist() == [2.0 * n] * 3
    assert rs.allreduce(np.ones(2), op=rs.Sum).tolist() == [n] * 2  # automatic names agree again
    assert rs.allgather(np.full(1, me)).tolist() == list(range(n))
    rs.shutdown()


def world_torch():
    import torch

    import ring_strategy.torch as hvd

    hvd.init()
    n, me = hvd.size(), hvd.rank()
    kept = hvd.allreduce_async(torch.ones(3), op=hvd.Sum) if me == 0 else None
    done = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="world1.done")
    assert hvd.synchronize(done).tolist() == [n] * 3
    hvd.shutdown()
    hvd.init()
    new = hvd.allreduce_async(torch.full((3,), 2.0), op=hvd.Sum, name="world2.first")  # engine ids restart at 1
    assert isinstance(new, int) and new != kept
    if kept is not None:
        raises(hvd.ShutdownError, lambda: hvd.poll(kept), f"handle {kept} ", "shutdown()")
        raises(hvd.ShutdownError, lambda: hvd.synchronize(kept), f"handle {kept} ", "shutdown()")
    # Synchronized in its own world: unknown now, as any synchronized handle (Horovod).
    raises(hvd.BadArgumentError, lambda: hvd.poll(done), "unknown handle")
    assert hvd.synchronize(done) is None
    assert hvd.synchronize(new).tolist() == [2.0 * n] * 3
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [n] * 2  # automatic names agree again
    hvd.shutdown()


ROOTS = [0, np.int64(0), np.int32(0), np.uint8(0)]
BAD_ROOTS = [True, 0.5, np.float64(0.0), "0", None, 2 ** 40]


def roots_numpy():
    rs.init()
    n, me = rs.size(), rs.rank()
    last = [n - 1, np.int64(n - 1), np.int16(n - 1)]
    for root in ROOTS + last:
        got = rs.broadcast(np.full(2, float(me)), root_rank=root)
        assert got.tolist() == [float(root)] * 2, (root, got)
    for bad in BAD_ROOTS:
        raises(rs.BadArgumentError, lambda: rs.broadcast(np.ones(2), root_rank=bad), "root")
    rs.shutdown()


def roots_torch():
    import torch

    import ring_strategy.torch as hvd

    hvd.init()
    n, me = hvd.size(), hvd.rank()
    last = [n - 1, np.int64(n - 1), np.int16(n - 1)]
    for root in ROOTS + last:
        want = [float(root)] * 2
        assert hvd.broadcast(torch.full((2,), float(me)), root).tolist() == want, root
        t = torch.full((2,), float(me))
        assert hvd.broadcast_(t, root_rank=root) is t and t.tolist() == want, root
        assert hvd.synchronize(hvd.broadcast_async(torch.full((2,), float(me)), root)).tolist() == want, root
        assert hvd.broadcast_object(("from", me), root_rank=root) == ("from", int(root)), root
        p = torch.full((3,), float(me))
        hvd.broadcast_parameters({"p": p}, root_rank=root)
        assert p.tolist() == [float(root)] * 3, root
    for bad in BAD_ROOTS:
        raises(hvd.BadArgumentError, lambda: hvd.broadcast(torch.ones(2), bad), "root")
        raises(hvd.BadArgumentError, lambda: hvd.broadcast_object(1, root_rank=bad), "root")
    hvd.shutdown()


def roots_tensorflow():
    import tensorflow as tf

    import ring_strategy.tensorflow as hvd

    hvd.init()
    n, me = hvd.size(), hvd.rank()
    for root in ROOTS + [n - 1, np.int64(n - 1)]:
        got = hvd.broadcast(tf.fill([2], float(me)), root)
        assert got.numpy().tolist() == [float(root)] * 2, (root, got)
        assert hvd.broadcast_object(("from", me), root_rank=root) == ("from", int(root)), root
    for bad in BAD_ROOTS:
        raises(hvd.BadArgumentError, lambda: hvd.broadcast(tf.ones(2), bad), "root")
    hvd.shutdown()


def main():
    run_scenarios(globals(), sys.argv[1:], os.environ.get("RING_RANK", "0"), stop_at_failure=True)


if __name__ == "__main__":
    main()
