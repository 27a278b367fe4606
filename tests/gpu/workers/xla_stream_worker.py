"""One rank of the CUDA XLA handler's logic (native/frameworks/xla/
collective_call.h, run_on_stream) on the stand-ins of the CUDA driver and
NCCL (stub_cuda.c, stub_nccl.c: device memory is host memory), called as
XLA calls the handler: arrays by address in this rank's GPU memory, XLA's
stream and device ordinal, through _native.xla_stream_call.

Checks allreduce (grouped, Sum and scaled Average), allgather, broadcast,
reducescatter (uneven rows), alltoall against numpy, a call ordered after
another by an extra argument, and the clear refusals (barrier, a result
of the wrong size, names that do not match the arrays, an alltoall whose
rows do not split evenly). Before each call it writes "mark <label>" into this
rank's stand-in log (STUB_CUDA_LOG, suffixed ".<rank>"), so the test can
see what the driver was asked during that call. Prints "OK <rank>".

With the argument ``cupy`` (tests/gpu/device_check.sh, on a real GPU) the
arrays are cupy mirrors of the numpy ones on this rank's GPU and XLA's
stream is a cupy stream: inputs are uploaded on it, and each result is
read back on it after the call (work queued on the stream after the
handler returned must see the result).
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ring_strategy as ring
from ring_strategy import _native

STREAM = 0x5A10  # XLA's stream, as the stand-in logs it (23056)
DEVICE = 0
LOG = os.environ.get("STUB_CUDA_LOG", "")
CUPY = "cupy" in sys.argv[1:]
_mirrors: dict = {}  # cupy mode: id(numpy array) -> (the array, its cupy mirror)
_cupy_stream = None


def _stream():
    global _cupy_stream
    if _cupy_stream is None:
        import cupy

        _cupy_stream = cupy.cuda.Stream(non_blocking=True)
    return _cupy_stream


def raw(a: np.ndarray):
    """The array as the handler gets it: address, bytes, dtype code, dims."""
    address = a.ctypes.data
    if CUPY:
        import cupy

        if id(a) not in _mirrors:
            with _stream():
                _mirrors[id(a)] = (a, cupy.asarray(a))
        address = _mirrors[id(a)][1].data.ptr
    return (address, a.nbytes, _native.DTYPES[a.dtype.name], list(a.shape))


def read_back(outs) -> None:
    """cupy mode: each result copied into its numpy array on XLA's stream."""
    if CUPY:
        for o in outs:
            _mirrors[id(o)][1].get(stream=_stream(), out=o)


def call(label: str, op: int, xs, outs, names=None, after=(), **kw) -> str:
    """The handler's call; returns its error text ('' on success)."""
    if LOG:
        with open(LOG, "a") as f:
            f.write(f"mark {label}\n")
    names = names or [f"{label}.{i}" for i in range(len(xs))]
    return _native.xla_stream_call(op, "\n".join(names), [raw(x) for x in [*xs, *after]], [raw(o) for o in outs],
                                   device=DEVICE, stream=STREAM, **kw)


def ok(label: str, op: int, xs, outs, **kw) -> None:
    error = call(label, op, xs, outs, **kw)
    assert error == "", (label, error)
    read_back(outs)


def main() -> None:
    global LOG, STREAM, DEVICE
    ring.init()
    me, n = ring.rank(), ring.size()
    DEVICE = ring.local_rank()
    if CUPY:
        import cupy

        DEVICE = ring.local_rank() % cupy.cuda.runtime.getDeviceCount()
        cupy.cuda.Device(DEVICE).use()
        STREAM = _stream().ptr
    if LOG:
        LOG = os.environ["STUB_CUDA_LOG"] = f"{LOG}.{me}"  # the stand-in reads it at each call
    every = [np.arange(6, dtype=np.float32) * (r + 1) + r for r in range(n)]
    ints = [np.arange(5, dtype=np.int32) - r for r in range(n)]
    out_f, out_i = np.full(6, 7, np.float32), np.full(5, 7, np.int32)
    ok("allreduce", _native.OP_ALLREDUCE, [every[me], ints[me]], [out_f, out_i], reduce_op=_native.REDUCE_OPS["Sum"])
    np.testing.assert_array_equal(out_f, np.sum(every, axis=0))
    np.testing.assert_array_equal(out_i, np.sum(ints, axis=0))
    scaled = np.empty(6, np.float32)
    ok("average", _native.OP_ALLREDUCE, [every[me]], [scaled], reduce_op=_native.REDUCE_OPS["Average"],
       prescale=0.5, postscale=3.0)
    np.testing.assert_allclose(scaled, np.mean(every, axis=0) * 1.5, rtol=1e-6)

    rows = (np.arange(6, dtype=np.float64).reshape(3, 2) + 10 * me)
    gathered = np.full((3 * n, 2), -1.0)
    ok("allgather", _native.OP_ALLGATHER, [rows], [gathered], after=[out_f])  # ordered after the allreduce
    np.testing.assert_array_equal(gathered, np.concatenate([np.arange(6.0).reshape(3, 2) + 10 * r for r in range(n)]))

    b = np.full(4, float(me), np.float32)
    ok("broadcast", _native.OP_BROADCAST, [b], [b], root=n - 1)  # in place, as XLA may alias
    np.testing.assert_array_equal(b, np.full(4, float(n - 1), np.float32))

    odd = np.arange(3 * (2 * n + 1), dtype=np.float32).reshape(2 * n + 1, 3) * (me + 1)
    mine = 3 if me == 0 else 2  # lower ranks get the extra row
    part = np.empty((mine, 3), np.float32)
    ok("reducescatter", _native.OP_REDUCESCATTER, [odd], [part], reduce_op=_native.REDUCE_OPS["Sum"])
    full = np.arange(3 * (2 * n + 1), dtype=np.float32).reshape(2 * n + 1, 3) * sum(range(1, n + 1))
    start = 0 if me == 0 else 3 + 2 * (me - 1)
    np.testing.assert_array_equal(part, full[start:start + mine])

    send = np.arange(2 * n * 2, dtype=np.int64).reshape(2 * n, 2) + 100 * me
    got = np.empty_like(send)
    ok("alltoall", _native.OP_ALLTOALL, [send], [got])
    np.testing.assert_array_equal(got, np.concatenate(
        [(np.arange(2 * n * 2).reshape(2 * n, 2) + 100 * r)[2 * me:2 * me + 2] for r in range(n)]))

    token = np.zeros(1, np.uint8)
    refused = call("barrier", _native.OP_BARRIER, [token], [token.copy()])
    assert refused.startswith("BadArgumentError: barrier and join"), refused
    short = np.empty((3 * n - 1, 2))
    refused = call("short", _native.OP_ALLGATHER, [rows], [short])
    assert refused.startswith("BadArgumentError: tensor 'short.0': the result has"), refused
    refused = _native.xla_stream_call(_native.OP_ALLREDUCE, "a\nb", [raw(b)], [raw(b)], device=DEVICE,
                                      stream=STREAM)
    assert refused == "BadArgumentError: ring's FFI call needs one result and one name per argument", refused
    if n > 1:
        rows3 = np.zeros((n + 1, 2), np.float32)
        refused = call("uneven", _native.OP_ALLTOALL, [rows3], [rows3.copy()])
        assert refused.startswith("BadArgumentError: tensor 'uneven.0': an alltoall in compiled code splits"), refused
    print(f"OK {me}", flush=True)
    ring.shutdown()


if __name__ == "__main__":
    main()
