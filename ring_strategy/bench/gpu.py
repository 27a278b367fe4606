"""``--device cuda``: ring and its GPU peers on CUDA tensors.

- ``ring``: ring_strategy.torch on torch CUDA tensors (the engine's NCCL or
  host-staged path, as RING_GPU_OPERATIONS says).
- ``nccl`` (``--compare nccl``): raw NCCL through ``cupy.cuda.nccl`` in the
  same processes, one communicator over every rank, on cupy's current
  stream; the unique id travels by ring's broadcast.
- ``torch-nccl`` (``--compare torch-nccl``): torch.distributed with the
  NCCL backend.

Every call returns once its result is complete on the device (the peers
synchronize their stream; ring's synchronize returns when the engine's event
has fired), so the times compare like for like. Results come back as torch
or cupy arrays; :func:`ring_strategy.bench.collectives.count_wrong` copies
them to the host only when ``--check`` asks.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend, Call, StepCall
from ring_strategy.bench.gloo import init_torch_group, to_torch, torch_collective

__all__ = ["GPU_PEERS", "RingCudaBackend", "NcclBackend", "TorchNcclBackend", "open_gpu_peer"]

GPU_PEERS = ("nccl", "torch-nccl")
_OPS_ERROR = "op should be one of allreduce, allgather, broadcast, alltoall, reducescatter. Got: {!r}"


def _device() -> Any:
    import torch

    index = rs.local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


class RingCudaBackend(Backend):
    """ring's collectives on torch CUDA tensors (``ring_strategy.torch``)."""

    name = "ring"

    def __init__(self) -> None:
        import ring_strategy.torch as hvd

        self._hvd = hvd
        self._dev = _device()

    def supports(self, op: str, dtype: np.dtype) -> bool:
        return dtype.name != "bfloat16" or op != "alltoall"

    def prepare(self, op: str, send: np.ndarray) -> Call:
        hvd, name = self._hvd, f"bench.cuda.{op}.{send.size}"
        inp = to_torch(send).to(self._dev)
        if op == "allreduce":
            buf = inp.clone()  # reduced in place, as the peers do
            return lambda: hvd.allreduce_(buf, op=hvd.Sum, name=name)
        if op == "allgather":
            return lambda: hvd.allgather(inp, name=name)
        if op == "broadcast":
            return lambda: hvd.broadcast(inp, 0, name=name)
        if op == "alltoall":
            return lambda: hvd.alltoall(inp, name=name)[0]
        if op == "reducescatter":
            return lambda: hvd.reducescatter(inp, op=hvd.Sum, name=name)
        raise ValueError(_OPS_ERROR.format(op))

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        hvd = self._hvd
        bufs = [to_torch(t).to(self._dev) for t in tensors]
        names = [f"bench.cuda.small.{i}" for i in range(len(bufs))]

        def step() -> List[Any]:
            handles = [hvd.allreduce_async(b, op=hvd.Sum, name=nm) for b, nm in zip(bufs, names)]
            return [hvd.synchronize(h) for h in handles]

        return {"ring": step}


class NcclBackend(Backend):
    """Raw NCCL through cupy.cuda.nccl, one communicator over every rank."""

    name = "nccl"

    def __init__(self) -> None:
        import cupy
        from cupy.cuda import nccl

        self._cp, self._nccl = cupy, nccl
        cupy.cuda.Device(_device().index).use()
        uid = np.array(nccl.get_unique_id(), np.int8) if rs.rank() == 0 else np.zeros(128, np.int8)
        uid = rs.broadcast(uid, 0, name="bench.nccl.uid")
        self._comm = nccl.NcclCommunicator(rs.size(), tuple(int(v) for v in uid), rs.rank())
        self._n = rs.size()

    def _types(self, dtype: np.dtype) -> Any:
        n = self._nccl
        table = {"float32": n.NCCL_FLOAT32, "float64": n.NCCL_FLOAT64, "float16": n.NCCL_FLOAT16,
                 "int8": n.NCCL_INT8, "uint8": n.NCCL_UINT8, "int32": n.NCCL_INT32, "int64": n.NCCL_INT64}
        return table[dtype.name]

    def supports(self, op: str, dtype: np.dtype) -> bool:
        return dtype.name != "bfloat16"

    def _run(self, launch: Any, out: Any) -> Call:
        stream = self._cp.cuda.get_current_stream()

        def call() -> Any:
            launch(stream.ptr)
            stream.synchronize()
            return out

        return call

    def prepare(self, op: str, send: np.ndarray) -> Call:
        cp, comm, dt, sum_ = self._cp, self._comm, self._types(send.dtype), self._nccl.NCCL_SUM
        inp = cp.asarray(send)
        count = send.size
        if op in ("allreduce", "broadcast"):
            buf = inp.copy()
            if op == "allreduce":
                return self._run(lambda s: comm.allReduce(buf.data.ptr, buf.data.ptr, count, dt, sum_, s), buf)
            return self._run(lambda s: comm.bcast(buf.data.ptr, count, dt, 0, s), buf)
        if op == "allgather":
            out = cp.empty(count * self._n, send.dtype)
            return self._run(lambda s: comm.allGather(inp.data.ptr, out.data.ptr, count, dt, s), out)
        if op == "reducescatter":
            out = cp.empty(count // self._n, send.dtype)
            return self._run(lambda s: comm.reduceScatter(inp.data.ptr, out.data.ptr, count // self._n, dt, sum_, s),
                             out)
        if op == "alltoall":
            return self._alltoall(inp, dt)
        raise ValueError(_OPS_ERROR.format(op))

    def _alltoall(self, inp: Any, dt: Any) -> Call:
        out, part = self._cp.empty_like(inp), inp.size // self._n
        step = part * inp.itemsize
        nccl, comm = self._nccl, self._comm

        def launch(s: int) -> None:
            nccl.groupStart()
            for r in range(self._n):
                comm.send(inp.data.ptr + r * step, part, dt, r, s)
                comm.recv(out.data.ptr + r * step, part, dt, r, s)
            nccl.groupEnd()

        return self._run(launch, out)

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        cp, comm, nccl = self._cp, self._comm, self._nccl
        bufs = [cp.asarray(t) for t in tensors]
        dt = self._types(tensors[0].dtype)

        def launch(s: int) -> None:
            nccl.groupStart()
            for b in bufs:
                comm.allReduce(b.data.ptr, b.data.ptr, b.size, dt, nccl.NCCL_SUM, s)
            nccl.groupEnd()

        run = self._run(launch, bufs)
        return {"nccl-grouped": run}

    def end_turn(self) -> None:
        self._cp.cuda.get_current_stream().synchronize()

    def close(self) -> None:
        self._comm.destroy()


class TorchNcclBackend(Backend):
    """torch.distributed with the NCCL backend on CUDA tensors."""

    name = "torch-nccl"

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist, self._dev = torch, dist, _device()
        init_torch_group("nccl")
        self._n = dist.get_world_size()

    def supports(self, op: str, dtype: np.dtype) -> bool:
        return dtype.name != "bfloat16"

    def _run(self, launch: Any, out: Any) -> Call:
        sync = self._torch.cuda.synchronize

        def call() -> Any:
            launch()
            sync(self._dev)
            return out

        return call

    def prepare(self, op: str, send: np.ndarray) -> Call:
        run, out = torch_collective(self._dist, op, to_torch(send).to(self._dev), self._n)
        return self._run(run, out)

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        dist = self._dist
        bufs = [to_torch(t).to(self._dev) for t in tensors]

        def launch() -> None:
            works = [dist.all_reduce(b, async_op=True) for b in bufs]
            for w in works:
                w.wait()

        return {"torch-nccl": self._run(launch, bufs)}

    def end_turn(self) -> None:
        self._dist.barrier()

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def open_gpu_peer(name: str) -> Backend:
    """The GPU peer called ``name`` (one of :data:`GPU_PEERS`), started over every ring rank."""
    if name == "nccl":
        return NcclBackend()
    if name == "torch-nccl":
        return TorchNcclBackend()
    raise ValueError(f"GPU peer should be one of {', '.join(GPU_PEERS)}. Got: {name!r}")
