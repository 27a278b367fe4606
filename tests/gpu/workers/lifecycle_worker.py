"""One rank of the NCCL backend's lifecycle checks (issue 40), on the strict stand-ins of the CUDA
driver and NCCL (stub_cuda.c, stub_nccl.c): creation, completion, growth, layout, teardown.
Flat NCCL (RING_HIERARCHICAL_ALLREDUCE=0); each rank's tensors on its local rank's GPU.

Usage: lifecycle_worker.py MODE. Prints "OK <rank>" when the mode passed, or "RAISED <rank>
<error>" for the error it expects.
  lost      (2 ranks) rank 0's allreduce never finishes on its GPU (the finalizer keeps
            polling its communicator); rank 1 has its result and leaves: rank 0 raises
            PeerFailureError, rank 1 prints OK.
  stuck     (2 ranks) rank 1 never arrives at the communicator's init: both raise.
  errored   an allreduce, then every communicator reports an asynchronous error (nothing
            in flight sees it) and the job shuts down: the communicators are aborted.
  healthy   the same without the error: destroyed.
  grow      batches of three allreduces in flight together (fused), each batch larger.
  teardown  (one rank) a GPU result held, then the driver tears itself down (as at
            interpreter exit), then the result is freed and the job shuts down.
  odd       fp16 tensors of odd lengths in flight together (fused).
  join      (2 ranks) rank 1 joins before it ever sent a CUDA tensor while rank 0
            allreduces on its GPU.
  held      (one rank, RING_NUM_NCCL_STREAMS=2) the first lane's work never finishes: an
            allreduce on the second lane completes meanwhile; leaves at once after OK.
  pool      (one rank) allgathers of one size, each result dropped before the next: the
            engine's GPU memory for them comes from its pool.
  vanish    (RING_HIERARCHICAL_ALLREDUCE=1, two hosts of one rank) the NCCL stages never
            finish, the engines' threads wait for them; rank 1 vanishes (exits without a
            word): rank 0 raises PeerFailureError.
  dlpack    (one rank) an allgather's GPU result taken through DLPack with stream=0xDEF0
            (the consumer's), another with stream=-1 (no wait).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

import numpy as np

import ring_strategy as ring
from ring_strategy._core import engine

from hierarchical_worker import expect_failure
from host_staged_worker import fused_on_gpu, submit
from nccl_one_rank_worker import host_view

OPS = engine.REDUCE_OPS
X = np.arange(64, dtype=np.float32)


def allreduce(name: str, x: np.ndarray = X, **kw) -> np.ndarray:
    out = np.zeros_like(x)
    engine.wait_all([submit(engine.ALLREDUCE, name, x, out, True, op=OPS["Sum"], **kw)])[0]
    return out


def lost(me: int) -> bool:
    if me == 0:
        os.environ["STUB_CUDA_EVENTS_PENDING"] = "1"
    handle = submit(engine.ALLREDUCE, "g", X, np.zeros_like(X), True, op=OPS["Sum"])
    if me == 0:
        expect_failure(lambda: engine.wait_all([handle])[0])
        return False
    engine.wait_all([handle])[0]
    return True


def stuck(me: int) -> bool:
    if me == 1:
        os.environ["STUB_NCCL_INIT_STUCK"] = "1"
    expect_failure(lambda: allreduce("g"))
    return False


def errored(me: int, error: bool = True) -> bool:
    allreduce("g")
    ring.barrier()
    if error:
        os.environ["STUB_NCCL_ASYNC_ERROR"] = "6"  # ncclRemoteError
    return True


def grow(me: int) -> bool:
    n = ring.size()
    for k in range(1, 6):
        xs = [np.full(20000 * k + i, me + 1, np.float32) for i in range(3)]
        for i, out in enumerate(fused_on_gpu(xs, OPS["Sum"])):
            assert (out == n * (n + 1) // 2).all() and out.size == 20000 * k + i, (k, i)
    return True


def teardown(me: int) -> bool:
    data, _, _ = engine.wait_all([submit(engine.ALLGATHER, "g", X.reshape(8, 8), None, True)])[0]
    engine.wait_all([submit(engine.ALLREDUCE, "h", X, np.zeros_like(X), True, op=OPS["Adasum"])])[0]  # staged
    ctypes.CDLL(os.environ["RING_CUDA_DRIVER_LIBRARY"]).stub_cuda_deinitialize()
    del data
    return True


def odd(me: int) -> bool:
    n, sizes = ring.size(), (3, 1001, 17, 255, 64)
    for step in range(3):
        xs = [np.full(k, me + 1, np.float16) for k in sizes]
        for k, out in zip(sizes, fused_on_gpu(xs, OPS["Sum"])):
            assert out.size == k and (out == n * (n + 1) // 2).all(), (step, k, out)
    return True


def join(me: int) -> bool:
    if me == 1:
        assert ring.join() == 0
        return True
    for step in range(2):
        assert allreduce(f"j{step}").tobytes() == X.tobytes()  # rank 1 added zeros
    ring.join()
    return True


def held(me: int) -> bool:
    os.environ["STUB_CUDA_HOLD_STREAM"] = "1"
    submit(engine.ALLREDUCE, "a", X, np.zeros_like(X), True, op=OPS["Sum"])
    time.sleep(0.2)  # its own response, on lane 0
    assert allreduce("b").tobytes() == X.tobytes()
    print(f"OK {me}", flush=True)
    os._exit(0)  # lane 0's work never ends: no shutdown


def dlpack(me: int) -> bool:
    for stream in (0xDEF0, -1):
        data, _, _ = engine.wait_all([submit(engine.ALLGATHER, f"g{stream}", X.reshape(8, 8), None, True)])[0]
        data.__dlpack__(stream=stream)
    return True


def vanish(me: int) -> bool:
    os.environ["STUB_CUDA_EVENTS_PENDING"] = "1"
    if me == 0:
        expect_failure(lambda: allreduce("g"))
        return False
    threading.Timer(1.0, lambda: os._exit(0)).start()  # while its own NCCL stage waits too
    allreduce("g")
    return False


def pool(me: int) -> bool:
    for step in range(5):
        data, shape, _ = engine.wait_all([submit(engine.ALLGATHER, f"p{step}", X.reshape(8, 8), None, True)])[0]
        assert host_view(data, X.dtype, shape).tobytes() == X.tobytes(), step
        del data
    return True


MODES = {"lost": lost, "stuck": stuck, "errored": errored, "healthy": lambda me: errored(me, error=False),
         "grow": grow, "teardown": teardown, "odd": odd, "join": join, "held": held, "dlpack": dlpack, "vanish": vanish, "pool": pool}


def main() -> None:
    ring.init()
    me = ring.rank()
    if MODES[sys.argv[1]](me):  # False: it raised as expected and leaves without shutdown
        ring.shutdown()
        print(f"OK {me}", flush=True)


if __name__ == "__main__":
    main()
