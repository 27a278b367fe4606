"""The NCCL backend in a job of one process, on the stand-ins of the CUDA
driver and NCCL (stub_cuda.c, stub_nccl.c: device memory is host memory,
one-rank collectives): the backend's fusion, copies, scale factors, device
results and its choice of what runs host-staged, each checked bitwise
against the CPU path. Prints "OK" at the end.
"""

from __future__ import annotations

import ctypes

import numpy as np

import ring_strategy as ring
from ring_strategy._core import engine

from host_staged_worker import _GET, on_gpu, submit

OPS = engine.REDUCE_OPS


def host_view(result, dtype, shape) -> np.ndarray:
    """A result: a numpy array, or a GPU DLPack array (whose memory the stand-in keeps on the host)."""
    if isinstance(result, np.ndarray):
        return result.view(dtype).reshape(shape)
    capsule = result.__dlpack__()
    data = ctypes.c_void_p.from_address(_GET(capsule, b"dltensor")).value
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert result.__dlpack_device__() == (2, ring.local_rank()), result.__dlpack_device__()
    return np.frombuffer(ctypes.string_at(data, nbytes), dtype).reshape(shape).copy()


def both(kind, name, arr, out_shape=None, with_out=True, **kw):
    """The operation on the GPU path and on the CPU path; asserts they agree bitwise."""
    got = []
    for gpu in (True, False):
        out = np.full(arr.shape if out_shape is None else out_shape, 7, arr.dtype) if with_out else None
        data, shape, _ = engine.wait_all([submit(kind, f"{name}.{'gpu' if gpu else 'cpu'}", arr, out, gpu, **kw)])[0]
        got.append(out if data is None else host_view(data, arr.dtype, shape))
    assert got[0].dtype == got[1].dtype and got[0].shape == got[1].shape, (name, got)
    assert got[0].tobytes() == got[1].tobytes(), (name, got)
    return got[0]


def main() -> None:
    ring.init()
    assert ring.size() == 1
    rng = np.random.default_rng(7)
    for dtype in ("float32", "float64", "float16", "int32", "int16", "uint8"):
        x = (rng.standard_normal(257) * 8).astype(dtype)
        both(engine.ALLREDUCE, f"sum.{dtype}", x, op=OPS["Sum"])
        both(engine.ALLREDUCE, f"avg.{dtype}", x, op=OPS["Average"])
        both(engine.ALLREDUCE, f"max.{dtype}", x, op=OPS["Max"])
        if dtype.startswith("float"):
            both(engine.ALLREDUCE, f"scaled.{dtype}", x, op=OPS["Average"], prescale=0.5, postscale=4.0)
        both(engine.BROADCAST, f"bcast.{dtype}", x, root=0)
        both(engine.ALLGATHER, f"gather.{dtype}", x.reshape(-1, 1)[:255].reshape(51, 5), with_out=False)
        both(engine.ALLTOALL, f"a2a.{dtype}", x[:250].reshape(50, 5), with_out=False, splits=[50])
        both(engine.REDUCESCATTER, f"rs.{dtype}", x[:250].reshape(50, 5), out_shape=(50, 5), op=OPS["Sum"])
    # Several in flight: fused into the lane's buffer.
    xs = [rng.standard_normal(k).astype(np.float32) for k in (3, 1000, 17)]
    outs = [np.empty_like(x) for x in xs]
    handles = [submit(engine.ALLREDUCE, f"fused.{i}", x, o, True, op=OPS["Sum"], prescale=2.0)
               for i, (x, o) in enumerate(zip(xs, outs))]
    for h in handles:
        engine.wait_all([h])[0]
    for x, o in zip(xs, outs):
        assert o.tobytes() == (x * np.float32(2.0)).tobytes()
    both(engine.ALLREDUCE, "empty", np.zeros(0, np.float32), op=OPS["Sum"])
    both(engine.ALLREDUCE, "adasum", rng.standard_normal(64).astype(np.float32), op=OPS["Adasum"])
    # A process set id used again after its set was removed names a new set: it gets its own communicator.
    rt = engine._runtime()
    for turn in range(2):
        rt.add_process_set(7, [0])
        x = np.arange(5, dtype=np.float32)
        out = np.empty_like(x)
        engine.wait_all([submit(engine.ALLREDUCE, f"set7.{turn}", x, out, True, op=OPS["Sum"], process_set=7)])[0]
        assert out.tobytes() == x.tobytes()
        rt.remove_process_set(7)
    ring.shutdown()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
