"""One rank of the host-staged GPU path, run on the CUDA driver stand-in
(tests/gpu/stub_cuda.c: "device" memory is host memory): arrays are numpy
arrays whose DLPack capsules say cuda:0, handed to the engine as a front
end hands it a GPU tensor (engine.enqueue with the producer's stream).

Every result is checked against numpy and, bitwise, against the same
operation on the CPU path. Prints "OK <rank>" at the end. With an argument
(a stand-in libnccl.so.2), rank 0 alone has NCCL: the ranks must agree to
run host-staged.
"""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

import ring_strategy as ring
from ring_strategy._core import engine
from ring_strategy.exceptions import BadArgumentError

_GET = ctypes.pythonapi.PyCapsule_GetPointer
_GET.restype = ctypes.c_void_p
_GET.argtypes = [ctypes.py_object, ctypes.c_char_p]
KDL_CUDA = 2
STREAM = 0xABC0  # the "caller's stream" every GPU enqueue passes


def on_gpu(arr: np.ndarray, device: int = 0):
    """A DLPack capsule of ``arr`` whose DLTensor says cuda:<device> (DLTensor: data, then device)."""
    capsule = arr.__dlpack__()
    dev = (ctypes.c_int32 * 2).from_address(_GET(capsule, b"dltensor") + ctypes.sizeof(ctypes.c_void_p))
    dev[0], dev[1] = KDL_CUDA, device
    return capsule


def submit(kind, name, arr, out, gpu: bool, **kw):
    """Enqueues the operation; on the GPU path its arrays are on this rank's own GPU (its local rank's, as
    NCCL refuses two ranks of a host on one GPU)."""
    code = engine.DTYPES[arr.dtype.name]
    device = ring.local_rank()
    inp = on_gpu(arr, device) if gpu else arr
    o = None if out is None else (on_gpu(out, device) if gpu else out)
    return engine.enqueue(kind, name, inp, o, code, arr.shape, stream=STREAM if gpu else 0, **kw)


def fused_on_gpu(xs, op: int):
    """Allreduces of every array in ``xs`` on the GPU path, all in flight at once (so fused); their outputs."""
    outs = [np.empty_like(x) for x in xs]
    handles = [submit(engine.ALLREDUCE, f"fused.{i}", x, o, True, op=op) for i, (x, o) in enumerate(zip(xs, outs))]
    for h in handles:
        engine.wait_all([h])[0]
    return outs


def both(kind, name, arr, with_out: bool, out_shape=None, **kw):
    """The operation on the GPU path and on the CPU path: (gpu result, cpu result)."""
    got = []
    for gpu in (True, False):
        out = np.full(arr.shape if out_shape is None else out_shape, 7, arr.dtype) if with_out else None
        handle = submit(kind, f"{name}.{'gpu' if gpu else 'cpu'}", arr, out, gpu, **kw)
        data, shape, splits = engine.wait_all([handle])[0]
        got.append(out if data is None else data.view(arr.dtype).reshape(shape))
    assert got[0].tobytes() == got[1].tobytes(), (name, got)
    return got[0]


def main() -> None:
    ring.init()
    me, n = ring.rank(), ring.size()
    if len(sys.argv) > 1 and me == 0:
        os.environ["RING_NCCL_LIBRARY"] = sys.argv[1]  # read at the first GPU operation
    rng = np.random.default_rng(1234 + me)
    ops = engine.REDUCE_OPS
    for i, dtype in enumerate(("float32", "float64", "float16", "int32")):
        everyone = [(np.random.default_rng([i, r]).standard_normal(1001) * 10).astype(dtype) for r in range(n)]
        x = everyone[me]
        got = both(engine.ALLREDUCE, f"sum.{dtype}", x, True, op=ops["Sum"])
        np.testing.assert_allclose(got.astype(np.float64), np.sum([e.astype(np.float64) for e in everyone], 0),
                                   rtol=1e-2 if dtype == "float16" else 1e-6, atol=1e-2 if dtype == "float16" else 1e-9)
        if dtype != "int32":
            both(engine.ALLREDUCE, f"avg.{dtype}", x, True, op=ops["Average"], prescale=0.5, postscale=3.0)
        got = both(engine.BROADCAST, f"bcast.{dtype}", x, True, root=n - 1)
        assert got.tobytes() == everyone[n - 1].tobytes()
        rows = x[: 3 * (me + 1)].reshape(me + 1, 3)
        got = both(engine.ALLGATHER, f"gather.{dtype}", rows, False)
        assert got.shape == (sum(range(1, n + 1)), 3)
        rs = x[: 10 * n].reshape(2 * n, 5)
        both(engine.REDUCESCATTER, f"rscatter.{dtype}", rs, True, out_shape=(2, 5), op=ops["Sum"])
    # Several tensors in flight at once: fused into one response.
    xs = [rng.standard_normal(k).astype(np.float32) for k in (1, 17, 300, 4096)]
    outs = fused_on_gpu(xs, ops["Sum"])
    for i, (x, o) in enumerate(zip(xs, outs)):
        ref = np.empty_like(x)
        engine.wait_all([submit(engine.ALLREDUCE, f"fused.cpu.{i}", x, ref, False, op=ops["Sum"])])[0]
        assert o.tobytes() == ref.tobytes(), i
    # An empty tensor, and alltoall (engine-allocated result, on the host).
    both(engine.ALLREDUCE, "empty", np.zeros(0, np.float32), True, op=ops["Sum"])
    a = np.arange(2 * n, dtype=np.float32) + 100 * me
    both(engine.ALLTOALL, "a2a", a, False, splits=[2] * n)
    # Bad input: a device this process does not have, and mixed devices.
    x = np.ones(4, np.float32)
    F32 = engine.DTYPES["float32"]
    for call, text in (
        (lambda: engine.enqueue(engine.ALLREDUCE, "bad.dev", on_gpu(x, 3), on_gpu(x.copy(), 3), F32, x.shape),
         f"no backend for device cuda:3: cuda:3 does not exist: this process sees {n} GPU(s)"),
        (lambda: engine.enqueue(engine.ALLREDUCE, "bad.mix", on_gpu(x, me), x.copy(), F32, x.shape),
         f"the output of 'bad.mix' is on cpu; its input is on cuda:{me}"),
    ):
        try:
            call()
        except BadArgumentError as e:
            assert text in str(e), str(e)
        else:
            raise AssertionError(f"no error: {text}")
    ring.barrier()  # no rank leaves (failing the others' engines) while another still checks its bad input
    ring.shutdown()
    print(f"OK {me}", flush=True)


if __name__ == "__main__":
    main()
