"""The mpi peer: MPI collectives through mpi4py, in the same processes.

MPI needs the job to be started by ``mpirun`` (so that its world matches
ring's); :func:`open_mpi` says why it cannot be used otherwise. MPI has no
standard datatype for float16 and bfloat16, so rows of those dtypes print n/a.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend, Call, StepCall

__all__ = ["MpiBackend", "open_mpi"]

_NO_MPI_TYPE = ("float16", "bfloat16")


def open_mpi() -> Tuple[Optional["MpiBackend"], str]:
    """Returns the mpi peer, or None and the reason it cannot run here.

    Every rank gets the same answer: mpi4py is installed on all of them or on
    none, and MPI's world either matches ring's on every rank or on none.
    """
    try:
        from mpi4py import MPI
    except ImportError:
        return None, "mpi4py is not installed (pip install mpi4py); skipping the mpi peer"
    comm = MPI.COMM_WORLD
    if comm.Get_size() != rs.size():
        return None, (
            f"MPI sees {comm.Get_size()} rank(s) but ring has {rs.size()}: start the job with "
            "mpirun to compare with MPI; skipping the mpi peer"
        )
    return MpiBackend(comm, MPI), ""


def _returning(run: Any, out: np.ndarray) -> Call:
    def call() -> np.ndarray:
        run()
        return out

    return call


class MpiBackend(Backend):
    """MPI collectives on numpy buffers (mpi4py's buffer interface)."""

    name = "mpi"

    def __init__(self, comm: Any, mpi: Any) -> None:
        self._comm = comm
        self._mpi = mpi
        self._n = comm.Get_size()

    def supports(self, op: str, dtype: np.dtype) -> bool:
        return dtype.name not in _NO_MPI_TYPE

    def prepare(self, op: str, send: np.ndarray) -> Call:
        comm, total = self._comm, self._mpi.SUM
        if op == "allreduce":
            out = np.empty_like(send)
            return _returning(lambda: comm.Allreduce(send, out, op=total), out)
        if op == "broadcast":
            buf = send.copy()
            return _returning(lambda: comm.Bcast(buf, root=0), buf)
        if op == "allgather":
            out = np.empty(send.size * self._n, send.dtype)
            return _returning(lambda: comm.Allgather(send, out), out)
        if op == "alltoall":
            out = np.empty_like(send)
            return _returning(lambda: comm.Alltoall(send, out), out)
        if op == "reducescatter":
            out = np.empty(send.size // self._n, send.dtype)
            return _returning(lambda: comm.Reduce_scatter_block(send, out, op=total), out)
        raise ValueError(f"op should be one of allreduce, allgather, broadcast, alltoall, reducescatter. Got: {op!r}")

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        if not tensors or not self.supports("allreduce", tensors[0].dtype):
            return {}
        comm, mpi = self._comm, self._mpi
        outs = [np.empty_like(t) for t in tensors]
        sizes = np.cumsum([t.size for t in tensors])[:-1]

        def one_by_one() -> List[np.ndarray]:
            requests = [comm.Iallreduce(t, o, op=mpi.SUM) for t, o in zip(tensors, outs)]
            mpi.Request.Waitall(requests)
            return outs

        def coalesced() -> List[np.ndarray]:
            flat = np.concatenate([t.reshape(-1) for t in tensors])
            total = np.empty_like(flat)
            comm.Allreduce(flat, total, op=mpi.SUM)
            return [part.reshape(t.shape) for part, t in zip(np.split(total, sizes), tensors)]

        return {"mpi": one_by_one, "mpi-coalesced": coalesced}

    def end_turn(self) -> None:
        self._comm.Barrier()
