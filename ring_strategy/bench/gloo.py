"""The gloo peer: torch.distributed with the gloo backend, in the same processes.

Rendezvous: rank 0 starts a ``torch.distributed.TCPStore`` on a free loopback
port (the operating system picks it, so there is no race for the port) and
hands the port to the other ranks with ring's own broadcast. ringrun starts
every worker on this host, so loopback reaches them all.

gloo's collectives work in place or into preallocated outputs, so
:meth:`GlooBackend.prepare` allocates once and the timed call is the bare
``torch.distributed`` call.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend, Call, StepCall

__all__ = ["GlooBackend", "init_gloo", "init_torch_group", "torch_collective", "to_torch", "to_numpy"]

RENDEZVOUS_TIMEOUT_SECONDS = 120.0


def init_gloo(timeout_s: float = RENDEZVOUS_TIMEOUT_SECONDS) -> None:
    """Starts torch.distributed's default group with gloo over every ring rank.

    ``ring_strategy.init()`` must have run; every rank must call this. Does
    nothing when the default group exists already.
    """
    init_torch_group("gloo", timeout_s)


def init_torch_group(backend: str, timeout_s: float = RENDEZVOUS_TIMEOUT_SECONDS) -> None:
    """Starts torch.distributed's default group with ``backend`` ("gloo",
    "nccl") over every ring rank, meeting through a store on loopback whose
    port ring's broadcast hands out. Every rank must call this; nothing
    happens when the default group exists already."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    rank, n = rs.rank(), rs.size()
    timeout = datetime.timedelta(seconds=timeout_s)
    store = None
    port = 0
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, n, is_master=True, wait_for_workers=False, timeout=timeout)
        port = store.port
    port = int(rs.broadcast(np.array([port], np.int64), 0, name=f"bench.{backend}.port")[0])
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, n, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=n, timeout=timeout)


def to_torch(arr: np.ndarray) -> Any:
    """A torch tensor sharing ``arr``'s memory (bfloat16 included)."""
    import torch

    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def to_numpy(tensor: Any, dtype: np.dtype) -> np.ndarray:
    """A numpy view of ``tensor`` with dtype ``dtype`` (bfloat16 included)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(dtype)
    return tensor.numpy()


def _gather_call(dist: Any) -> Any:
    # all_gather_single is the newer name of all_gather_into_tensor.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _reduce_scatter_call(dist: Any) -> Any:
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _returning(run: Callable[[], Any], out: Any, dtype: np.dtype) -> Call:
    """A call that runs ``run`` and returns ``out`` as numpy."""

    def call() -> np.ndarray:
        run()
        return to_numpy(out, dtype)

    return call


def torch_collective(dist: Any, op: str, inp: Any, n: int) -> Tuple[Callable[[], Any], Any]:
    """torch.distributed's call of ``op`` on tensor ``inp`` (left as it is)
    over ``n`` ranks, with its output allocated once: the call, and the
    tensor it writes. Allreduce and broadcast work in place on a copy."""
    if op in ("allreduce", "broadcast"):
        buf = inp.clone()
        if op == "allreduce":
            return (lambda: dist.all_reduce(buf)), buf
        return (lambda: dist.broadcast(buf, src=0)), buf
    if op == "allgather":
        out = inp.new_empty(inp.numel() * n)
        gather = _gather_call(dist)
        return (lambda: gather(out, inp)), out
    if op == "alltoall":
        out = inp.new_empty(inp.numel())
        return (lambda: dist.all_to_all_single(out, inp)), out
    if op == "reducescatter":
        out = inp.new_empty(inp.numel() // n)
        scatter = _reduce_scatter_call(dist)
        return (lambda: scatter(out, inp)), out
    raise ValueError(f"op should be one of allreduce, allgather, broadcast, alltoall, reducescatter. Got: {op!r}")


class GlooBackend(Backend):
    """torch.distributed collectives on gloo; :func:`init_gloo` runs on construction."""

    name = "gloo"

    def __init__(self) -> None:
        import torch.distributed as dist

        init_gloo()
        self._dist = dist
        self._n = dist.get_world_size()

    def prepare(self, op: str, send: np.ndarray) -> Call:
        run, out = torch_collective(self._dist, op, to_torch(send), self._n)
        return _returning(run, out, send.dtype)

    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        dist = self._dist
        dtype = tensors[0].dtype
        each = [to_torch(t.copy()) for t in tensors]
        flat_parts = [to_torch(t.copy()) for t in tensors]
        sizes = [t.size for t in tensors]

        def one_by_one() -> List[np.ndarray]:
            works = [dist.all_reduce(t, async_op=True) for t in each]
            for work in works:
                work.wait()
            return [to_numpy(t, dtype) for t in each]

        def coalesced() -> List[np.ndarray]:
            import torch

            flat = torch.cat([t.reshape(-1) for t in flat_parts])
            dist.all_reduce(flat)
            for t, part in zip(flat_parts, flat.split(sizes)):
                t.copy_(part.view_as(t))
            return [to_numpy(t, dtype) for t in flat_parts]

        return {"gloo": one_by_one, "gloo-coalesced": coalesced}

    def end_turn(self) -> None:
        self._dist.barrier()

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
