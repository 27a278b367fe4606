"""One rank of the NCCL backend at several ranks, of its hierarchical
allreduce and of its failure paths, on the stand-ins of the CUDA driver and
NCCL (stub_cuda.c, stub_nccl.c: device memory is host memory; communicators
of processes on this machine through shared memory).

Usage: hierarchical_worker.py MODE [MODE ...] (ops and collectives may be combined)
  ops      every reduction x dtype against the CPU path, fused tensors;
           results identical on every rank. Prints "OK <rank>".
  sets     (3 ranks) allreduces of two overlapping process sets, {0, 1} and
           {1, 2}, in flight together, against the CPU path; then both sets
           are removed, and a line "worker-done 0" goes to the stand-in's log
           after three more operations. Prints "OK <rank>".
  collectives  broadcast, allgather (different first dimensions), alltoall
           (uneven splits), reducescatter (even and uneven rows) against the
           CPU path, bitwise. Prints "OK <rank>".
  fail     rank 0's GPU work never finishes and its communicator reports
           NCCL's remote error (STUB_CUDA_EVENTS_PENDING, STUB_NCCL_ASYNC_ERROR):
           every rank must raise PeerFailureError. Prints "RAISED <rank> <type>".
  hang     rank 0's GPU work never finishes, no error: every rank must raise
           within RING_TIMEOUT_SECONDS. Prints "RAISED <rank> <type>".
  finalizer  (one rank, flat NCCL) a broadcast whose work never finishes
           and whose communicator reports the remote error: its handle and
           the next operation raise PeerFailureError. Prints "RAISED ...".
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ring_strategy as ring
from ring_strategy._core import engine

from host_staged_worker import fused_on_gpu, submit
from nccl_one_rank_worker import host_view

OPS = engine.REDUCE_OPS


def gpu_and_cpu(name, x, **kw):
    """The allreduce on the GPU path and the CPU path: (gpu, cpu) results."""
    got = []
    for gpu in (True, False):
        out = np.full_like(x, 7)
        data, shape, _ = engine.wait_all([submit(engine.ALLREDUCE, f"{name}.{gpu}", x, out, gpu, **kw)])[0]
        got.append(out if data is None else host_view(data, x.dtype, shape))
    return got


def check_ops() -> None:
    me = ring.rank()
    results = []
    for dtype in ("float32", "float64", "float16", "int32", "uint8"):
        x = (np.random.default_rng([me, 3]).standard_normal(1001) * 10).astype(dtype)
        reductions = ["Sum", "Min", "Max", "Product"] + (["Average"] if dtype.startswith("float") else [])
        for op in reductions:
            gpu, cpu = gpu_and_cpu(f"{op}.{dtype}", x, op=OPS[op])
            assert gpu.tobytes() == cpu.tobytes(), (op, dtype, gpu[:4], cpu[:4])
            results.append(gpu)
        if dtype.startswith("float"):
            gpu, cpu = gpu_and_cpu(f"scaled.{dtype}", x, op=OPS["Average"], prescale=0.5, postscale=3.0)
            tol = 1e-2 if dtype == "float16" else 1e-6  # the scale applied before the sum, not after it
            np.testing.assert_allclose(gpu.astype(np.float64), cpu.astype(np.float64), rtol=tol, atol=tol)
            results.append(gpu)
    # Several in flight: fused, then staged through the host as one shard.
    xs = [np.random.default_rng([me, k]).standard_normal(k).astype(np.float32) for k in (1, 17, 300, 4097)]
    outs = fused_on_gpu(xs, OPS["Sum"])
    for i, (x, o) in enumerate(zip(xs, outs)):
        _, cpu = gpu_and_cpu(f"fused.ref.{i}", x, op=OPS["Sum"])
        assert o.tobytes() == cpu.tobytes(), i
        results.append(o)
    # Every rank holds the same bits.
    mine = np.frombuffer(b"".join(r.tobytes() for r in results), np.uint8)
    every = ring.allgather(mine.reshape(1, -1))
    assert all(row.tobytes() == every[0].tobytes() for row in every)


def check_collectives() -> None:
    """The NCCL backend's other collectives, each against the CPU path, bitwise."""
    me, n = ring.rank(), ring.size()
    for dtype in ("float32", "float16", "int64", "uint8"):
        x = (np.random.default_rng([me, 5]).standard_normal(6 * n * 5) * 10).astype(dtype).reshape(6 * n, 5)
        cases = [
            (engine.BROADCAST, "bcast", x, x.shape, dict(root=n - 1)),
            (engine.ALLGATHER, "gather", x[: me + 1], None, {}),  # a different first dimension per rank
            (engine.ALLGATHER, "gather.even", x[:3], None, {}),
            (engine.ALLTOALL, "a2a", x[: 3 * n], None, dict(splits=[(me + r) % 3 + 1 for r in range(n)][:n - 1]
                                                            + [3 * n - sum((me + r) % 3 + 1 for r in range(n - 1))])),
            (engine.REDUCESCATTER, "rs.even", x, (6, 5), dict(op=OPS["Sum"])),
            (engine.REDUCESCATTER, "rs.uneven", x[: 2 * n + 1], (3 if me == 0 else 2, 5), dict(op=OPS["Sum"])),
        ]
        for kind, name, arr, out_shape, kw in cases:
            got = []
            for gpu in (True, False):
                out = None if out_shape is None else np.full(out_shape, 7, arr.dtype)
                data, shape, _ = engine.wait_all([submit(kind, f"{name}.{dtype}.{gpu}", arr, out, gpu, **kw)])[0]
                got.append(out if data is None else host_view(data, arr.dtype, shape))
            assert got[0].shape == got[1].shape and got[0].tobytes() == got[1].tobytes(), (name, dtype, got)


def check_sets() -> None:
    """Two overlapping process sets, each with its own communicators (rank 1 is in both), their
    GPU and CPU allreduces in flight together."""
    me = ring.rank()
    rt = engine._runtime()
    rt.add_process_set(1, [0, 1])
    rt.add_process_set(2, [1, 2])
    ring.barrier()  # every rank has registered both sets before any uses them
    mine = [s for s, ranks in ((1, (0, 1)), (2, (1, 2))) if me in ranks]
    for step in range(4):
        x = (np.random.default_rng([me, step]).standard_normal(300) * 10).astype(np.float32)
        outs = {(s, gpu): np.full_like(x, 7) for s in mine for gpu in (True, False)}
        handles = [submit(engine.ALLREDUCE, f"set{s}.{step}.{gpu}", x, out, gpu, op=OPS["Sum"], process_set=s)
                   for (s, gpu), out in outs.items()]
        for h in handles:
            engine.wait_all([h])[0]
        for s in mine:
            assert outs[(s, True)].tobytes() == outs[(s, False)].tobytes(), (s, step)
    # Removed sets give back their communicators at the engine's next steps, before shutdown.
    ring.barrier()  # no rank still uses them
    rt.remove_process_set(1)
    rt.remove_process_set(2)
    x = np.ones(8, np.float32)
    for step in range(3):
        engine.wait_all([submit(engine.ALLREDUCE, f"after.{step}", x, np.empty_like(x), True, op=OPS["Sum"])])[0]
    with open(os.environ["STUB_NCCL_LOG"], "a") as log:
        log.write("worker-done 0\n")
    # No rank shuts down (destroying the rest) before every rank wrote its line. A rank that has
    # its result and shuts down at once must not fail this operation on the others, whose
    # results the finalizer may not have delivered yet.
    engine.wait_all([submit(engine.ALLREDUCE, "after.done", x, np.empty_like(x), True, op=OPS["Sum"])])[0]


def expect_failure(run) -> None:
    try:
        run()
    except ring.RingError as e:
        print(f"RAISED {ring.rank()} {type(e).__name__}: {e}", flush=True)
        return
    raise AssertionError("no error")


def main() -> None:
    mode = sys.argv[1]
    ring.init()
    me = ring.rank()
    x = np.arange(64, dtype=np.float32)
    if mode in ("ops", "collectives", "sets"):
        for m in sys.argv[1:]:
            {"ops": check_ops, "collectives": check_collectives, "sets": check_sets}[m]()
        ring.shutdown()
        print(f"OK {me}", flush=True)
        return
    if me == 0:  # read by the stand-ins at every call
        os.environ["STUB_CUDA_EVENTS_PENDING"] = "1"
        if mode in ("fail", "finalizer"):
            os.environ["STUB_NCCL_ASYNC_ERROR"] = "6"  # ncclRemoteError
    if mode == "finalizer":
        out = np.zeros_like(x)
        expect_failure(lambda: engine.wait_all([submit(engine.BROADCAST, "b", x, out, True, root=0)])[0])
        expect_failure(lambda: ring.allreduce(x, name="after"))
        return
    expect_failure(lambda: engine.wait_all([submit(engine.ALLREDUCE, "g", x, np.zeros_like(x), True,
                                                      op=OPS["Sum"])]))


if __name__ == "__main__":
    main()
