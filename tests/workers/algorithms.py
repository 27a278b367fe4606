"""Worker of tests/test_allreduce_algorithms.py: the allreduce algorithms
of RING_ALLREDUCE_ALGORITHM in one job (the world restarted for each).

For each algorithm it reduces a set of tensors (random values with many
+0/-0 ties, so Min depends on operand order) one by one and fused (one
grouped call), with Sum, Min and Average. It checks that fusing changes no
bit, that every rank has the same bits, and that the tree algorithms
(tree, doubling, halving-doubling: one reduction order) agree bit for bit,
and (four ranks or more) differ from the ring's.
Prints ``<rank>: algorithms ok``.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

import ring_strategy as rs

SIZES = [1, 7, 1000, 5000, 3, 40000]


def _tensors(rank: int) -> list:
    rng = np.random.default_rng([rank, 7])
    out = []
    for n in SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        x[::3] = np.where(np.arange(len(x[::3])) % 2 == rank % 2, 0.0, -0.0)
        out.append(x)
    return out


def _digest(arrays: list) -> str:
    return hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()


def _results(algorithm: str) -> dict:
    """Digests of every op's results, alone and fused, under `algorithm`."""
    os.environ["RING_ALLREDUCE_ALGORITHM"] = algorithm
    rs.init()
    xs = _tensors(rs.rank())
    found = {}
    for op_name in ("Sum", "Min", "Average"):
        op = getattr(rs, op_name)
        alone = [rs.allreduce(x, op=op, name=f"{algorithm}.{op_name}.alone.{i}") for i, x in enumerate(xs)]
        fused = rs.grouped_allreduce(xs, op=op, name=f"{algorithm}.{op_name}.fused")
        assert _digest(alone) == _digest(fused), (algorithm, op_name, "fusing changed the result")
        found[op_name] = _digest(alone)
    everyone = rs.allgather_object(found)
    assert all(d == found for d in everyone), (algorithm, "ranks differ")
    rs.shutdown()
    return found


def _pair_results(streaming: str) -> str:
    """Two ranks, one 3 MiB tensor and a 1.6 MB group (the two-rank block
    allreduce, pair_allreduce) with RING_STREAMING_STORES=`streaming`:
    checks the sums against numpy's and returns their digest."""
    os.environ["RING_STREAMING_STORES"] = streaming
    rs.init()
    from ring_strategy.basics import _runtime
    assert _runtime().config["streaming_stores"] == (streaming == "1")
    rng = np.random.default_rng([rs.rank(), 11])
    big = rng.standard_normal(3 << 18).astype(np.float32)
    parts = [rng.standard_normal(4096 + i).astype(np.float32) for i in range(100)]
    got = [rs.allreduce(big, op=rs.Sum, name="pair.big")]
    got += rs.grouped_allreduce(parts, op=rs.Sum, name="pair.parts")
    mine, theirs = rs.allgather_object([big, *parts])  # two ranks: x0 + x1 is exact in either order
    for i, (g, a, b) in enumerate(zip(got, mine, theirs)):
        assert np.array_equal(g, a + b), (streaming, i, "wrong sum")
    rs.shutdown()
    return _digest(got)


def main() -> None:
    if sys.argv[1:] == ["--streaming-stores"]:
        assert _pair_results("0") == _pair_results("1"), "streaming stores changed the result"
        print(f"{os.environ.get('RING_RANK', '0')}: algorithms ok", flush=True)
        return
    algorithms = sys.argv[1:]
    results = {a: _results(a) for a in algorithms}
    trees = [results[a] for a in algorithms if a in ("tree", "doubling", "halving-doubling")]
    assert all(t == trees[0] for t in trees), "the tree algorithms differ"
    size = int(os.environ.get("RING_SIZE", "1"))
    if size >= 4 and trees and "ring" in results:  # they did run: another order, other bits
        assert trees[0]["Sum"] != results["ring"]["Sum"], "the tree order gave the ring's bits"
    rank = int(os.environ.get("RING_RANK", os.environ.get("HOROVOD_RANK", "0")))
    print(f"{rank}: algorithms ok", flush=True)


if __name__ == "__main__":
    main()
