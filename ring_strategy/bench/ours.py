"""ring's own collectives, through the public numpy API (``ring_strategy.ops``).

Allreduce reduces a copy of the input in place (``out=`` the array itself),
as gloo's ``all_reduce`` does, and the small-tensors case reduces into
output arrays made once, as MPI's does; the other operations return a new array per
call, as the numpy API does, so their times include allocating it.
Tensors get fixed names, as in a training loop, so ranks agree on them and
the engine's response cache applies from the second step on.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend, Call, StepCall

__all__ = ["RingBackend"]


class RingBackend(Backend):
    """ring's collectives on numpy arrays; ``ring_strategy.init()`` must have run."""

    name = "ring"

    def prepare(self, op: str, send: np.ndarray) -> Call:
        name = f"bench.{op}.{send.size}"
        if op == "allreduce":
            buf = send.copy()  # reduced in place, as gloo's all_reduce does
            return lambda: rs.allreduce(buf, op=rs.Sum, name=name, out=buf)
        if op == "allgather":
            return lambda: rs.allgather(send, name=name)
        if op == "broadcast":
            return lambda: rs.broadcast(send, 0, name=name)
        if op == "alltoall":
            return lambda: rs.alltoall(send, name=name)
        if op == "reducescatter":
            return lambda: rs.reducescatter(send, op=rs.Sum, name=name)
        raise ValueError(f"op should be one of allreduce, allgather, broadcast, alltoall, reducescatter. Got: {op!r}")

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        names = [f"bench.small.{i}" for i in range(len(tensors))]
        outs = [np.empty_like(t) for t in tensors]  # written every step, as MPI's receive buffers are

        def step() -> List[np.ndarray]:
            handles = [rs.allreduce_async(t, op=rs.Sum, name=nm, out=o) for t, nm, o in zip(tensors, names, outs)]
            return [rs.synchronize(h) for h in handles]

        def grouped_step() -> List[np.ndarray]:
            return rs.synchronize(rs.grouped_allreduce_async(tensors, op=rs.Sum, name="bench.grouped", out=outs))

        return {"ring": step, "ring-grouped": grouped_step}
