"""Bad input on real ranks: ``python bad_input.py SCENARIO... [TAG]``.

Each scenario runs on every rank and prints ``<rank>: <scenario> ok``, or
``<rank>: <scenario> FAILED: <why>`` and goes on with the next one. After
each scenario an allreduce checks that the engine still works. Arguments
that name no scenario (the tests' tag) are ignored.
"""

from __future__ import annotations

import gc
import re
import sys
from typing import Any, Callable, List, Tuple

import numpy as np

import ring_strategy as rs
from tests.workers.checks import equal, raises, run_scenarios

N = ME = 0


def engine_works(label: str) -> None:
    """An allreduce after an error gives the right answer."""
    equal(rs.allreduce(np.ones(3, np.float32), op=rs.Sum, name=f"works.after.{label}"), np.full(3, N, np.float32),
          f"works after {label}")


def _mismatch_cases() -> List[Tuple[str, str, Callable[[], Any], Callable[[int], str]]]:
    """(tensor name, field named by the error, the call, value shown for rank r)."""
    last = ME == N - 1
    f32 = np.float32
    return [
        ("mm.shape", "shape", lambda: rs.allreduce(np.zeros(3 + last, f32), name="mm.shape"),
         lambda r: f"[{3 + (r == N - 1)}]"),
        ("mm.dtype", "dtype", lambda: rs.allreduce(np.zeros(3, np.float64 if last else f32), name="mm.dtype"),
         lambda r: "float64" if r == N - 1 else "float32"),
        ("mm.op", "reduce op", lambda: rs.allreduce(np.zeros(3, f32), op=rs.Max if last else rs.Sum, name="mm.op"),
         lambda r: "Max" if r == N - 1 else "Sum"),
        ("mm.root", "root rank", lambda: rs.broadcast(np.zeros(3, f32), root_rank=int(last), name="mm.root"),
         lambda r: str(int(r == N - 1))),
        ("mm.kind", "operation", lambda: (rs.allgather if last else rs.allreduce)(np.zeros(3, f32), name="mm.kind"),
         lambda r: "allgather" if r == N - 1 else "allreduce"),
        ("mm.prescale", "prescale", lambda: rs.allreduce(np.zeros(3, f32), prescale_factor=1.0 + ME,
                                                         name="mm.prescale"), lambda r: str(1 + r)),
        ("mm.postscale", "postscale", lambda: rs.allreduce(np.zeros(3, f32), postscale_factor=1.0 + ME,
                                                           name="mm.postscale"), lambda r: str(1 + r)),
        ("mm.gather", "shape", lambda: rs.allgather(np.zeros((2, 1 + ME), f32), name="mm.gather"),
         lambda r: f"[{1 + r}]"),
        ("mm.alltoall", "shape", lambda: rs.alltoall(np.zeros((N, 2 + ME), f32), name="mm.alltoall"),
         lambda r: f"[{2 + r}]"),
        ("mm.reducescatter", "shape", lambda: rs.reducescatter(np.zeros((4, 1 + ME), f32), name="mm.reducescatter"),
         lambda r: f"[4, {1 + r}]"),
    ]


def mismatch_values() -> None:
    """Every rank gets a MismatchError naming the tensor, the field, every
    rank and each rank's value; the engine goes on."""
    for name, field, call, value_of in _mismatch_cases():
        msg = str(raises(rs.MismatchError, call, f"'{name}'", field))
        for r in range(N):
            assert re.search(rf"\brank[s]?\b[^:;]*\b{r}\b", msg), f"{name}: rank {r} not named: {msg}"
            assert value_of(r) in msg, f"{name}: value {value_of(r)!r} of rank {r} not shown: {msg}"
        engine_works(name)


def alltoall_splits() -> None:
    """Splits that are negative, do not sum to the first dimension or do not
    have one entry per rank: BadArgumentError, nothing sent."""
    x = np.zeros((N + 1, 2), np.float32)
    raises(rs.BadArgumentError, lambda: rs.alltoall(x, splits=[-1, N + 2] + [0] * (N - 2)), "negative")
    raises(rs.BadArgumentError, lambda: rs.alltoall(x, splits=[1] * N if N > 1 else [0]), "sum")
    raises(rs.BadArgumentError, lambda: rs.alltoall(x, splits=[1] * (N + 1) + [0]), "one entry per rank")
    raises(rs.BadArgumentError, lambda: rs.alltoall(np.zeros((N + 1, 2)), name="a2a.even"), "divisible")
    raises(rs.BadArgumentError, lambda: rs.alltoall(np.float32(1.0)), "at least one dimension")
    # Splits may differ between ranks: rank r sends r + 1 rows to rank 0.
    mine = [ME + 1] + [0] * (N - 1)
    out, received = rs.alltoall(np.full((ME + 1, 2), ME, np.float32), splits=mine, name="a2a.uneven")
    want = [r + 1 if ME == 0 else 0 for r in range(N)]
    assert received.tolist() == want, (received, want)
    assert out.shape == (sum(want), 2), out.shape
    engine_works("alltoall")


def non_contiguous() -> None:
    """Strided, transposed, reversed and Fortran-ordered inputs give the
    same results as their contiguous copies, and stay untouched."""
    base = np.arange(48, dtype=np.float64).reshape(6, 8) + ME
    views = {"strided": base[::2, ::3], "transposed": base.T, "reversed": base[::-1],
             "fortran": np.asfortranarray(base)}
    for label, x in views.items():
        before = x.copy()
        want_sum = sum(np.ascontiguousarray(x) - ME + r for r in range(N))
        equal(rs.allreduce(x, op=rs.Sum, name=f"nc.ar.{label}"), want_sum, label)
        gathered = np.concatenate([np.ascontiguousarray(x) - ME + r for r in range(N)])
        equal(rs.allgather(x, name=f"nc.ag.{label}"), gathered, label)
        equal(rs.broadcast(x, root_rank=N - 1, name=f"nc.bc.{label}"), np.ascontiguousarray(x) - ME + N - 1, label)
        assert np.array_equal(x, before), f"{label}: input modified"
    rows = base.T[: 2 * N]  # 2 rows per rank, strided
    got = rs.alltoall(rows, name="nc.a2a")
    want = np.concatenate([np.ascontiguousarray(rows[2 * ME: 2 * ME + 2]) - ME + r for r in range(N)])
    equal(got, want, "alltoall")
    engine_works("non_contiguous")


def zero_size() -> None:
    """Empty tensors of several shapes through every collective."""
    for shape in [(0,), (0, 3), (3, 0), (2, 0, 4)]:
        x = np.zeros(shape, np.float32)
        for op in (rs.Sum, rs.Average, rs.Min, rs.Max, rs.Product):
            equal(rs.allreduce(x, op=op, name=f"z.ar.{shape}.{op}"), x, f"allreduce{shape}")
        equal(rs.broadcast(x, root_rank=N - 1, name=f"z.bc.{shape}"), x, f"broadcast{shape}")
    # Rank 0 has no rows to gather; the others have one each.
    got = rs.allgather(np.full((0 if ME == 0 else 1, 2), ME, np.int32), name="z.ag")
    equal(got, np.array([[r, r] for r in range(1, N)], np.int32).reshape(-1, 2), "allgather")
    out, received = rs.alltoall(np.zeros((0, 2), np.float32), splits=[0] * N, name="z.a2a")
    assert out.shape == (0, 2) and received.tolist() == [0] * N, (out.shape, received)
    # Fewer rows than ranks: the last ranks get empty blocks.
    got = rs.reducescatter(np.ones((1, 2), np.float32), op=rs.Sum, name="z.rs")
    equal(got, np.full((1 if ME == 0 else 0, 2), N, np.float32), "reducescatter")
    engine_works("zero_size")


def wrong_types() -> None:
    """Arguments of the wrong type or kind: a clear error, nothing sent."""
    x = np.ones(2, np.float32)
    raises(rs.BadArgumentError, lambda: rs.allreduce(x, name=3), "name")
    raises(rs.BadArgumentError, lambda: rs.allreduce(x, name=""), "name")
    raises(rs.BadArgumentError, lambda: rs.allreduce(x, op=True), "op")
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.array([object()])), "dtype", "object")
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.array(["a"])), "dtype")
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.zeros(2, [("a", "f4")])), "dtype")
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.zeros(2, np.complex128)), "complex128")
    raises(rs.BadArgumentError, lambda: rs.synchronize(5), "Handle")
    raises(ValueError, lambda: rs.allreduce(x, prescale_factor="x"))
    engine_works("wrong_types")


def duplicate_names() -> None:
    """A name in flight cannot be reused by any operation until it completes.

    Each rank in turn submits first and checks while the others have not
    submitted yet, so its operation cannot complete (and free the name)
    during the checks; the others submit once it says so."""
    for turn in range(N):
        if ME == turn:
            h = rs.allreduce_async(np.ones(2, np.float32), op=rs.Sum, name="dup.any")
            raises(rs.BadArgumentError, lambda: rs.allgather_async(np.ones(2), name="dup.any"), "dup.any", "in flight")
            raises(rs.BadArgumentError, lambda: rs.broadcast_async(np.ones(2), 0, name="dup.any"), "in flight")
            rs.allreduce(np.zeros(1), name=f"dup.go{turn}")
        else:
            rs.allreduce(np.zeros(1), name=f"dup.go{turn}")
            h = rs.allreduce_async(np.ones(2, np.float32), op=rs.Sum, name="dup.any")
        equal(rs.synchronize(h), np.full(2, N, np.float32), "dup")
    equal(rs.allgather(np.ones(1), name="dup.any"), np.ones(N), "reuse")  # free again
    engine_works("duplicate_names")


def init_twice() -> None:
    """init() while initialized changes nothing; shutdown() twice is safe;
    after shutdown() collectives raise ShutdownError until init() again."""
    rs.init()
    assert (rs.rank(), rs.size()) == (ME, N)
    engine_works("init_twice")
    rs.shutdown()
    rs.shutdown()
    raises(rs.ShutdownError, lambda: rs.allreduce(np.ones(1)), "not initialized")
    raises(rs.ShutdownError, lambda: rs.rank(), "not initialized")
    rs.init()
    assert (rs.rank(), rs.size()) == (ME, N)
    engine_works("reinit")


def root_rank_fractional() -> None:
    """A root rank that is not an integer: BadArgumentError (not truncated)."""
    x = np.ones(2, np.float32)
    for bad in (0.5, 1.5, "0"):
        raises(rs.BadArgumentError, lambda: rs.broadcast(x, root_rank=bad, name="root.fractional"), "root")
    engine_works("root_rank_fractional")


def root_rank_huge() -> None:
    """A root rank beyond any rank, even beyond 32 bits: BadArgumentError."""
    x = np.ones(2, np.float32)
    for bad in (N, -1, 2 ** 31, 2 ** 40, -(2 ** 63)):
        raises(rs.BadArgumentError, lambda: rs.broadcast(x, root_rank=bad, name="root.huge"), "root")
    engine_works("root_rank_huge")


def dropped_handle() -> None:
    """Dropping the Handle of an operation in flight must not free the
    arrays the engine is still using."""
    for i in range(3):
        rs.allreduce_async(np.ones(1 << 22, np.float32), op=rs.Sum, name=f"dropped.{i}")
        gc.collect()
        filler = [np.full(1 << 20, 7.0) for _ in range(16)]  # reuse the freed memory
        engine_works(f"dropped.{i}")
        del filler


def process_sets() -> None:
    """A set that was never registered is refused on the rank that names it,
    before anything is sent (the name stays free), and a set of every rank
    is the global set."""
    import torch

    import ring_strategy.torch as hvd

    x = torch.ones(3)
    every = hvd.ProcessSet(list(range(N)))
    mine = every if ME == 0 else hvd.ProcessSet([ME])
    if N > 1 and ME > 0:
        raises(hvd.BadArgumentError, lambda: hvd.allreduce(x, name="ps.same", process_set=mine), "not registered")
    want = torch.full((3,), float(N))
    got = hvd.allreduce(x, op=hvd.Sum, name="ps.same", process_set=every if ME % 2 else hvd.global_process_set)
    assert torch.equal(got, want), got
    engine_works("process_sets")


def main() -> None:
    global N, ME
    rs.init()
    N, ME = rs.size(), rs.rank()
    run_scenarios(globals(), [a for a in sys.argv[1:] if a in globals()], ME)
    rs.shutdown()


if __name__ == "__main__":
    main()
