"""Horovod-compatible collectives on MXNet NDArrays, under the names of
``horovod.mxnet.mpi_ops``.

An NDArray crosses into the engine as a numpy copy (``asnumpy()``, which
also waits for MXNet's own pending writes to it); results come back as new
NDArrays on the input's context, or, for the in-place ``*_`` forms, are
copied into the input. The operations are synchronous: each returns once
its result is there. ``priority`` is accepted for compatibility and has no
effect (the engine orders operations by negotiation).

MXNet 1.9.1 is CPU-only here, as is this build.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import mxnet as mx
import numpy as np

from ring_strategy import ops as _np
from ring_strategy._core.rules import Average, Sum
from ring_strategy.basics import (  # noqa: F401  (re-exported, as Horovod's mpi_ops does)
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
from ring_strategy.build_queries import (  # noqa: F401  (re-exported: Horovod's build queries)
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    gpu_available,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from ring_strategy.timeline import start_timeline, stop_timeline  # noqa: F401  (re-exported)


def _host(tensor: Any, what: str = "tensor") -> np.ndarray:
    """``tensor``'s values as a numpy array (waits for MXNet to finish writing it)."""
    if not isinstance(tensor, mx.nd.NDArray):
        raise BadArgumentError(f"{what} should be an mxnet NDArray. Got: {type(tensor).__name__}")
    if tensor.stype != "default":
        raise BadArgumentError(f"{what} should be a dense NDArray. Got storage type {tensor.stype!r}")
    return tensor.asnumpy()


def _nd(values: np.ndarray, like: mx.nd.NDArray) -> mx.nd.NDArray:
    """``values`` as a new NDArray on ``like``'s context."""
    return mx.nd.array(values, ctx=like.context, dtype=values.dtype)


def _reduce_op(average: Any) -> int:
    """Horovod MXNet's ``average`` flag as a reduction op."""
    if not isinstance(average, (bool, np.bool_)):
        raise BadArgumentError(f"average should be True or False. Got: {average!r}")
    return Average if average else Sum


def _allreduce_async(tensor: Any, average: Any, name: Optional[str], prescale_factor: float,
                     postscale_factor: float, process_set: Any) -> _np.Handle:
    op = _reduce_op(average)
    return _np.allreduce_async(_host(tensor), op, name, prescale_factor, postscale_factor, process_set=process_set)


def allreduce(tensor: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: Any = global_process_set) -> mx.nd.NDArray:
    """Averages (or, with ``average=False``, sums) ``tensor`` over all ranks.

    Args:
        tensor: an NDArray of the same shape and dtype on every rank.
        average: average (True) or sum (False).
        name: unique name while in flight; generated in call order when omitted.
        priority: accepted, no effect.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
        process_set: the ranks that take part.

    Returns:
        A new NDArray with the result; ``tensor`` is left as it was.
    """
    handle = _allreduce_async(tensor, average, name, prescale_factor, postscale_factor, process_set)
    return _nd(_np.synchronize(handle), tensor)


def allreduce_(tensor: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: Any = global_process_set) -> mx.nd.NDArray:
    """:func:`allreduce` written into ``tensor``, which is returned."""
    handle = _allreduce_async(tensor, average, name, prescale_factor, postscale_factor, process_set)
    tensor[:] = _np.synchronize(handle)
    return tensor


def _grouped_allreduce(tensors: Sequence[Any], average: Any, name: Optional[str], prescale_factor: float,
                       postscale_factor: float, process_set: Any) -> List[np.ndarray]:
    """Every tensor's reduction, submitted together (so the engine may fuse
    them) under the names ``"<name>.<i>"``."""
    if not isinstance(tensors, (list, tuple)):
        raise BadArgumentError(f"tensors should be a list of NDArrays. Got: {type(tensors).__name__}")
    op = _reduce_op(average)
    return _np.synchronize(_np.grouped_allreduce_async([_host(t) for t in tensors], op, name, prescale_factor,
                                                       postscale_factor, process_set=process_set))


def grouped_allreduce(tensors: Sequence[Any], average: bool = True, name: Optional[str] = None, priority: int = 0,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Any = global_process_set) -> List[mx.nd.NDArray]:
    """:func:`allreduce` of each NDArray of ``tensors``, as one group; returns new NDArrays."""
    results = _grouped_allreduce(tensors, average, name, prescale_factor, postscale_factor, process_set)
    return [_nd(r, t) for r, t in zip(results, tensors)]


def grouped_allreduce_(tensors: Sequence[Any], average: bool = True, name: Optional[str] = None, priority: int = 0,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = global_process_set) -> Sequence[mx.nd.NDArray]:
    """:func:`grouped_allreduce` written into ``tensors``, which is returned."""
    results = _grouped_allreduce(tensors, average, name, prescale_factor, postscale_factor, process_set)
    for r, t in zip(results, tensors):
        t[:] = r
    return tensors


def allgather(tensor: Any, name: Optional[str] = None, priority: int = 0,
              process_set: Any = global_process_set) -> mx.nd.NDArray:
    """Every rank's ``tensor`` concatenated along the first dimension, in rank
    order. The first dimension may differ between ranks; the others must match."""
    return _nd(_np.allgather(_host(tensor), name, process_set), tensor)


def broadcast(tensor: Any, root_rank: int, name: Optional[str] = None, priority: int = 0,
              process_set: Any = global_process_set) -> mx.nd.NDArray:
    """``root_rank``'s ``tensor`` as a new NDArray on every rank (same shape
    and dtype everywhere); ``tensor`` is left as it was."""
    return _nd(_np.broadcast(_host(tensor), root_rank, name, process_set), tensor)


def broadcast_(tensor: Any, root_rank: int, name: Optional[str] = None, priority: int = 0,
               process_set: Any = global_process_set) -> mx.nd.NDArray:
    """:func:`broadcast` written into ``tensor``, which is returned."""
    tensor[:] = _np.broadcast(_host(tensor), root_rank, name, process_set)
    return tensor


def alltoall(tensor: Any, splits: Any = None, name: Optional[str] = None, priority: int = 0,
             process_set: Any = global_process_set) -> Any:
    """Sends block r of ``tensor``'s rows to rank r and gathers the blocks sent here.

    Args:
        tensor: an NDArray with at least one dimension.
        splits: rows sent to each rank (a list or an NDArray of ints summing
            to the first dimension); an even split when omitted.
        name: unique name while in flight.
        priority: accepted, no effect.
        process_set: the ranks that take part.

    Returns:
        The received rows in rank order; when ``splits`` was given, the pair
        ``(output, received_splits)`` with ``received_splits`` an int32 NDArray.
    """
    if isinstance(splits, mx.nd.NDArray):
        splits = splits.asnumpy()
    result = _np.alltoall(_host(tensor), splits, name, process_set)
    if splits is None:
        return _nd(result, tensor)
    output, received = result
    return _nd(output, tensor), mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)
