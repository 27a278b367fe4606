"""Every collective x dtype x element count, checked against numpy.

Run under ringrun; exits non-zero with the failures listed when any check
fails. Data are small integers so float sums are exact and the reference is
independent of summation order.
"""

import sys

import ml_dtypes
import numpy as np

import ring_strategy as rs
from tests.workers.checks import close, equal

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
OPS = {"Sum": rs.Sum, "Average": rs.Average, "Min": rs.Min, "Max": rs.Max, "Product": rs.Product}
COUNTS = [0, 1, 7, 1001]
LARGE = 4 * 1024 * 1024 + 3  # about 4 M elements, for a few dtypes
failures = []


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def data(name, count, r, salt=0):
    rng = np.random.default_rng(1000 * r + 7 * count + salt)
    if name == "bool":
        return rng.integers(0, 2, count).astype(bool)
    lo = 0 if name == "uint8" else -3
    return rng.integers(lo, 4, count).astype(np_dtype(name))


def reference_allreduce(name, op, count, n):
    inputs = [data(name, count, r).astype(np.float64 if name != "bool" else bool) for r in range(n)]
    if name == "bool":
        if op in ("Sum", "Max"):
            return np.logical_or.reduce(inputs) if inputs else None
        return np.logical_and.reduce(inputs)
    stack = np.stack(inputs)
    if op in ("Sum", "Average"):
        out = stack.sum(0)
        if op == "Average":
            out = out * (1.0 / n)
            if np.issubdtype(np_dtype(name), np.integer):
                out = np.trunc(out)
    elif op == "Min":
        out = stack.min(0)
    elif op == "Max":
        out = stack.max(0)
    else:
        out = stack.prod(0)
    if name == "uint8":
        out = np.mod(out, 256)
    return out.astype(np_dtype(name))


def check(label, got, want, tol=0.0):
    """Records a failure rather than raising, so that one run lists every broken case."""
    try:
        if tol:
            close(got, want, label, rtol=tol, atol=tol)
        else:
            equal(got, want, label)
    except AssertionError as e:
        failures.append(str(e))


def test_allreduce(n, me):
    for name in DTYPES:
        counts = COUNTS + ([LARGE] if name in ("float32", "bfloat16", "int64") else [])
        for opname, op in OPS.items():
            for count in counts:
                if count == LARGE and opname not in ("Sum", "Max"):
                    continue
                label = f"allreduce {name} {opname} n={count}"
                x = data(name, count, me)
                if name == "bool" and opname == "Average":
                    try:
                        rs.allreduce(x, op=op, name=label)
                        failures.append(f"{label}: expected BadArgumentError")
                    except rs.BadArgumentError:
                        pass
                    continue
                tol = 1e-2 if (opname == "Average" and name in ("float16", "bfloat16")) else 0.0
                tol = 1e-6 if (opname == "Average" and name in ("float32", "float64")) else tol
                check(label, rs.allreduce(x, op=op, name=label), reference_allreduce(name, opname, count, n), tol)


def test_scale_factors(n, me):
    x = data("float32", 1001, me)
    got = rs.allreduce(x, op=rs.Sum, prescale_factor=2.0, postscale_factor=0.25, name="scaled")
    want = reference_allreduce("float32", "Sum", 1001, n) * np.float32(0.5)
    check("prescale/postscale", got, want, 1e-6)


def test_allgather(n, me):
    for name in DTYPES:
        for rows_of in (lambda r: r + 1, lambda r: 0 if r == 0 else 2 * r + 1, lambda r: 1001):
            blocks = [data(name, rows_of(r) * 3, r, salt=5).reshape(-1, 3) for r in range(n)]
            label = f"allgather {name} rows={[rows_of(r) for r in range(n)]}"
            check(label, rs.allgather(blocks[me], name=label), np.concatenate(blocks))
    check("allgather scalar", rs.allgather(np.float32(me)), np.arange(n, dtype=np.float32))


def test_broadcast(n, me):
    for name in DTYPES:
        for count in COUNTS + [LARGE] * (name == "float32"):
            for root in range(n):
                x = data(name, count, me, salt=root)
                label = f"broadcast {name} n={count} root={root}"
                check(label, rs.broadcast(x, root_rank=root, name=label), data(name, count, root, salt=root))


def test_alltoall(n, me):
    def splits_of(r):
        return [(r + j) % 3 for j in range(n)]

    for name in DTYPES:
        sends = [data(name, sum(splits_of(r)) * 2, r, salt=9).reshape(-1, 2) for r in range(n)]
        label = f"alltoall {name}"
        out, received = rs.alltoall(sends[me], splits=splits_of(me), name=label)
        want, want_splits = [], []
        for r in range(n):
            offsets = np.cumsum([0] + splits_of(r))
            want.append(sends[r][offsets[me]:offsets[me + 1]])
            want_splits.append(splits_of(r)[me])
        check(label, out, np.concatenate(want))
        check(label + " received splits", received, np.asarray(want_splits, dtype=np.int32))
    even = np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2) + 100 * me
    got = rs.alltoall(even, name="alltoall even")
    want = np.concatenate([np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2)[2 * me:2 * me + 2] + 100 * r for r in range(n)])
    check("alltoall even", got, want)


def test_reducescatter(n, me):
    for name in ["int32", "float32", "float64", "float16", "bfloat16", "uint8"]:
        for opname in ("Sum", "Average", "Max"):
            for rows in COUNTS:
                label = f"reducescatter {name} {opname} rows={rows}"
                x = data(name, rows * 2, me).reshape(rows, 2)
                full = reference_allreduce(name, opname, rows * 2, n).reshape(rows, 2)
                start = me * (rows // n) + min(me, rows % n)
                mine = rows // n + (1 if me < rows % n else 0)
                tol = 1e-2 if (opname == "Average" and name in ("float16", "bfloat16")) else 0.0
                tol = 1e-6 if (opname == "Average" and name in ("float32", "float64")) else tol
                check(label, rs.reducescatter(x, op=OPS[opname], name=label), full[start:start + mine], tol)


def main():
    rs.init()
    n, me = rs.size(), rs.rank()
    for test in (test_allreduce, test_scale_factors, test_allgather, test_broadcast, test_alltoall,
                 test_reducescatter):
        test(n, me)
        rs.barrier()
    for f in failures[:30]:
        print("FAIL", f)
    print(f"rank {me}: {'FAILED ' + str(len(failures)) if failures else 'all checks passed'}")
    rs.shutdown()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
