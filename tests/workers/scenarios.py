"""Multi-rank scenarios run under ringrun: `python scenarios.py NAME`.

Each scenario prints "<rank>: ok" and exits 0 when its checks pass on this
rank; anything else is a failure the calling test reports.
"""

import hashlib
import os
import sys
import threading
import time

import numpy as np

import ring_strategy as rs
from ring_strategy import _contracts as names
from tests.workers.checks import equal, raises


def different_orders():
    """Tensors submitted in a rank-dependent order complete without deadlock."""
    n, me = rs.size(), rs.rank()
    names = [f"t{i}" for i in range(50)]
    order = names if me % 2 == 0 else list(reversed(names))
    if me == 2:
        order = names[25:] + names[:25]
    handles = {nm: rs.allreduce_async(np.full(10, int(nm[1:]) + me, np.float32), op=rs.Sum, name=nm) for nm in order}
    for nm in names:
        equal(rs.synchronize(handles[nm]), np.full(10, n * int(nm[1:]) + n * (n - 1) / 2, np.float32), nm)


def many_in_flight():
    """1,000 tensors in flight at once, fused and completed correctly."""
    n, me = rs.size(), rs.rank()
    for step in range(3):  # later steps use the response cache
        handles = [rs.allreduce_async(np.full(i % 17 + 1, i + me, np.float64), op=rs.Sum, name=f"g{i}")
                   for i in range(1000)]
        for i, h in enumerate(handles):
            equal(rs.synchronize(h), np.full(i % 17 + 1, n * i + n * (n - 1) / 2), (step, i))


def mismatch():
    """Disagreeing ranks get a MismatchError on every rank; the engine goes on."""
    n, me = rs.size(), rs.rank()
    cases = [
        ("shape", lambda: rs.allreduce(np.zeros(3 + (me == n - 1), np.float32), name="bad.shape"), "shape"),
        ("dtype", lambda: rs.allreduce(np.zeros(3, np.float32 if me == 0 else np.float64), name="bad.dtype"), "dtype"),
        ("op", lambda: rs.allreduce(np.zeros(3, np.float32), op=rs.Sum if me == 0 else rs.Max, name="bad.op"), "reduce op"),
        ("root", lambda: rs.broadcast(np.zeros(3, np.float32), root_rank=0 if me == 0 else 1, name="bad.root"), "root rank"),
        ("kind", lambda: (rs.allreduce if me == 0 else rs.allgather)(np.zeros(3, np.float32), name="bad.kind"), "operation"),
    ]
    for label, call, field in cases:
        msg = str(raises(rs.MismatchError, call, field, f"'bad.{label}'"))
        assert "rank 0" in msg or "ranks 0" in msg, msg
        # The engine keeps working after the error.
        assert rs.allreduce(np.ones(2, np.float32), op=rs.Sum, name=f"after.{label}")[0] == n


def bad_arguments():
    """Local argument errors raise BadArgumentError without sending anything."""
    n = rs.size()
    x = np.zeros(4, np.float32)
    checks = [
        lambda: rs.broadcast(x, root_rank=n),
        lambda: rs.broadcast(x, root_rank=-1),
        lambda: rs.alltoall(np.zeros((3, 2), np.float32), splits=[1] * (n + 1)),
        lambda: rs.alltoall(np.zeros((3, 2), np.float32), splits=[5] + [0] * (n - 1)),
        lambda: rs.allreduce(np.zeros(3, np.complex64)),
        lambda: rs.allreduce(x, op=42),
        lambda: rs.allreduce(np.zeros(3, bool), op=rs.Average),
        lambda: rs.allreduce(x, out=np.zeros(5, np.float32)),
        lambda: rs.allreduce(x, out=np.zeros(4, np.float64)),
        lambda: rs.allreduce(x, out=np.zeros(8, np.float32)[::2]),
        lambda: rs.allreduce_async(x, out=np.zeros(5, np.float32)),
        lambda: rs.allreduce_async(x, op=42),
    ]
    for call in checks:
        raises(rs.BadArgumentError, call)
    # Rank 0 checks while the others wait in a barrier it has not reached, so
    # its first "dup" cannot complete meanwhile (a name is free again once
    # its operation has completed).
    if n > 1 and rs.rank() == 0:
        h = rs.allreduce_async(x, name="dup")
        raises(rs.BadArgumentError, lambda: rs.allreduce_async(x, name="dup"), "already in flight")
    rs.barrier()
    if n > 1 and rs.rank() != 0:
        h = rs.allreduce_async(x, name="dup")
    if n > 1:
        rs.synchronize(h)
    assert rs.allreduce(np.ones(1, np.float32), op=rs.Sum)[0] == n
    # out=: into a given array, and in place.
    y = np.arange(6, dtype=np.float64) + rs.rank()
    out = np.empty_like(y)
    assert rs.allreduce(y, op=rs.Sum, out=out) is out
    expected = n * np.arange(6) + n * (n - 1) / 2
    assert np.array_equal(out, expected)
    rs.allreduce(y, op=rs.Sum, out=y)
    assert np.array_equal(y, expected)
    # A strided input is reduced from a contiguous copy.
    z = (np.arange(12, dtype=np.float64) + rs.rank())[::2]
    assert np.array_equal(rs.allreduce(z, op=rs.Sum), n * np.arange(0, 12, 2) + n * (n - 1) / 2)
    assert np.array_equal(rs.synchronize(rs.allreduce_async(z, op=rs.Sum)), n * np.arange(0, 12, 2) + n * (n - 1) / 2)
    into = np.empty(6)
    assert rs.synchronize(rs.allreduce_async(np.ascontiguousarray(z), op=rs.Sum, out=into)) is into


def deterministic():
    """Bitwise identical results across ranks and fusion layouts."""
    n, me = rs.size(), rs.rank()
    rng = np.random.default_rng(me)
    xs = [rng.standard_normal(s).astype(np.float32) for s in (1, 7, 1001, 33333)]
    alone = [rs.allreduce(x, name=f"alone{i}") for i, x in enumerate(xs)]
    handles = [rs.allreduce_async(x, name=f"fused{i}") for i, x in enumerate(xs)]
    fused = [rs.synchronize(h) for h in handles]
    for a, f in zip(alone, fused):
        assert a.tobytes() == f.tobytes()
    digest = int(hashlib.sha256(np.concatenate(alone).tobytes()).hexdigest()[:15], 16)
    every = rs.allgather(np.array([digest], np.int64))
    assert (every == every[0]).all(), every
    print(f"{me}: digest {int(digest)}")


def join():
    """Rank 1 runs out of data first: it joins and adds zeros to the others'
    allreduces; a broadcast meanwhile is an error; join returns the last rank."""
    n, me = rs.size(), rs.rank()
    steps = {1: 1}.get(me, 3)
    for s in range(steps):
        got = rs.allreduce(np.full(4, me + 1.0, np.float32), op=rs.Sum, name=f"g{s}")
        assert np.allclose(got, sum(r + 1.0 for r in range(n) if {1: 1}.get(r, 3) > s)), (s, got)
        handles = [rs.allreduce_async(np.ones(3), name=f"f{s}.{i}") for i in range(5)]
        active = sum(1 for r in range(n) if {1: 1}.get(r, 3) > s)
        for h in handles:
            assert np.allclose(rs.synchronize(h), active / n)
    if me == 0:
        raises(rs.BadArgumentError, lambda: rs.broadcast(np.ones(2), root_rank=0, name="while.joined"), "joined")
    last = rs.join()
    assert last != 1 and 0 <= last < n, last
    assert rs.allreduce(np.ones(2), op=rs.Sum, name="after.join")[0] == n


def cached_changes():
    """A tensor every rank has agreed on (cached, its bits only counted on
    rank 0) that one rank then submits with another shape fails with
    MismatchError on every rank, twice; once the ranks agree again it runs
    with the new shape. A rank that joins while the others' bits for a
    cached tensor wait for it completes that tensor with its zeros."""
    n, me = rs.size(), rs.rank()
    for step in range(3):
        equal(rs.allreduce(np.ones(4, np.float32), op=rs.Sum, name="c"), np.full(4, n, np.float32), ("cached", step))
    changed = np.ones(4 + (me == n - 1), np.float32)
    for _ in range(2):  # the second time, every rank's request is its own last one: still checked
        raises(rs.MismatchError, lambda: rs.allreduce(changed, op=rs.Sum, name="c"), "shape", "'c'")
    for step in range(3):
        equal(rs.allreduce(np.ones(5, np.float32), op=rs.Sum, name="c"), np.full(5, n, np.float32), ("again", step))
    steps = {1: 2}.get(me, 4)
    for s in range(steps):
        want = sum(r + 1.0 for r in range(n) if {1: 2}.get(r, 4) > s)
        equal(rs.allreduce(np.full(3, me + 1.0, np.float32), op=rs.Sum, name="j"), np.full(3, want, np.float32),
              ("join", s))
    last = rs.join()
    assert last != 1 and 0 <= last < n, last


def forever():
    """Allreduces until killed (for the Ctrl-C test, which reads the job id)."""
    print(f"{rs.rank()}: started job {os.environ[names.JOB_ID]}", flush=True)
    while True:
        rs.allreduce(np.ones(1000, np.float32), name="spin")


def sync_beside_async():
    """Operations another thread submits and only polls complete while this
    thread runs synchronous ones (which drive the engine themselves, the
    background thread standing aside) and after it stops."""
    n, me = rs.size(), rs.rank()
    outcome = {}

    def poller():
        for i in range(40):
            h = rs.allreduce_async(np.full(3, i + me, np.float32), op=rs.Sum, name=f"polled{i}")
            deadline = time.monotonic() + 30
            while not rs.poll(h):
                if time.monotonic() > deadline:
                    outcome["error"] = f"polled{i} unfinished after 30 s"
                    return
                time.sleep(0.0005)
            equal(rs.synchronize(h), np.full(3, n * i + n * (n - 1) / 2, np.float32), i)
        outcome["ok"] = True

    thread = threading.Thread(target=poller)
    thread.start()
    for i in range(300):
        equal(rs.allreduce(np.full(2, me, np.int64), op=rs.Sum, name="driven"), np.full(2, n * (n - 1) // 2), i)
    thread.join(60)
    assert outcome.get("ok"), outcome


def after_shutdown():
    rs.shutdown()
    raises(rs.ShutdownError, lambda: rs.allreduce(np.zeros(1, np.float32)))


def main():
    rs.init()
    globals()[sys.argv[1]]()
    if rs.is_initialized():
        rs.barrier()
    print(f"{rs.rank() if rs.is_initialized() else '-'}: ok")
    rs.shutdown()


if __name__ == "__main__":
    main()
