"""Tensors over 2 GiB and over 2**31 elements on 2 ranks:
``python large_tensor.py [TAG]``. Prints ``<rank>: <check> ok`` for each
check and ``<rank>: peak rss <MiB> MiB for <MiB> MiB tensors``."""

from __future__ import annotations

import resource

import numpy as np

import ring_strategy as rs

BIG = 2**31 + 17  # int8 elements: over 2 GiB and over 2**31 elements
MIB = 2**20


def all_equal(a: np.ndarray, value: int) -> bool:
    """Every element is ``value``, checked 256 MiB at a time (a whole-array
    comparison would add a temporary as large as the tensor to the peak)."""
    step = 2**28
    return all(bool((a[i:i + step] == value).all()) for i in range(0, a.size, step))


def report(name: str) -> None:
    print(f"{rs.rank()}: {name} ok", flush=True)


def main() -> None:
    rs.init()
    me = rs.rank()
    x = np.ones(BIG, np.int8)
    out = rs.allreduce(x, op=rs.Sum, name="big.allreduce")
    assert out.shape == (BIG,) and all_equal(out, 2)
    report("allreduce")
    del out
    x[-1] = me + 5
    got = rs.broadcast(x, 1, name="big.broadcast")
    assert got[-1] == 6 and got[0] == 1 and got.size == BIG
    report("broadcast")
    del got, x
    half = np.full(2**30 + 2**29 + me, me, np.int8)  # 1.5 GiB each: 3 GiB gathered
    gathered = rs.allgather(half, name="big.allgather")
    n0 = 2**30 + 2**29
    assert gathered.size == 2 * n0 + 1 and gathered[n0 - 1] == 0 and gathered[n0] == 1 and gathered[-1] == 1
    report("allgather")
    del gathered, half
    # Two 1.1 GiB allreduces in flight together under a fusion threshold over 2 GiB.
    parts = [np.full(2**30 + 2**27, 1 + i, np.int8) for i in range(2)]
    handles = [rs.allreduce_async(p, op=rs.Sum, name=f"big.fused.{i}") for i, p in enumerate(parts)]
    for i, h in enumerate(handles):
        r = rs.synchronize(h)
        assert r[0] == 2 * (1 + i) and r[-1] == 2 * (1 + i)
    report("fusion_over_2GiB")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"{me}: peak rss {peak:.0f} MiB for {BIG / MIB:.0f} MiB tensors", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
