"""Collective operations on numpy arrays and other arrays that speak DLPack.
Inputs are read in place (zero-copy when C-contiguous); results are new
numpy arrays. Arrays on a CUDA GPU (cupy's, or any whose DLPack device is
CUDA) go to the engine's GPU path and give cupy results.

Every operation has an ``*_async`` form that returns a :class:`Handle`
immediately; :func:`synchronize` waits for it and returns the result,
:func:`poll` tells whether it is done.

A front end like the others, on the core (:mod:`ring_strategy._core`):
these are the core's collectives on arrays
(:mod:`ring_strategy._core.arrays`) under Horovod's names and defaults,
and the short path of a numpy allreduce over every rank.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ring_strategy._core import arrays as _arrays
from ring_strategy._core import engine as _engine
from ring_strategy._core import handles as _handles
from ring_strategy._core.arrays import DTYPE_CODES as _DTYPE_CODES
from ring_strategy._core.arrays import Handle, out_ready as _out_ready
from ring_strategy._core.registry import ProcessSet, global_process_set
from ring_strategy._core.rules import (  # noqa: F401  (the reduction ops are part of this API)
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
)
from ring_strategy.exceptions import BadArgumentError

__all__ = [
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "Handle", "synchronize", "poll",
    "allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async", "allgather", "allgather_async",
    "broadcast", "broadcast_async", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "join", "barrier",
]


def synchronize(handle: Handle) -> Any:
    """Waits for an operation and returns its result (raises its error).

    Raises:
        ShutdownError: the handle belongs to a world that ended with
            ``shutdown()`` (its operation was cancelled).
    """
    if not isinstance(handle, Handle):
        raise BadArgumentError(f"synchronize() expects a Handle. Got: {handle!r}")
    return _handles.synchronize(handle)


def poll(handle: Handle) -> bool:
    """True when the operation has finished (synchronize() will not block)."""
    if not isinstance(handle, Handle):
        raise BadArgumentError(f"poll() expects a Handle. Got: {handle!r}")
    return _handles.poll(handle)


def allreduce_async(
    tensor: Any,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    *,
    out: Optional[np.ndarray] = None,
    process_set: ProcessSet = global_process_set,
) -> Handle:
    """Starts reducing ``tensor`` over the ranks of ``process_set``; see :func:`allreduce`."""
    if process_set is global_process_set and tensor.__class__ is np.ndarray:
        started = _allreduce_lean(tensor, op, name, prescale_factor, postscale_factor, out, True)
        if started is not None:
            return started
    return _arrays.allreduce(tensor, op, name, prescale_factor, postscale_factor, True, out, process_set)


def _allreduce_lean(arr: np.ndarray, op: int, name: Optional[str], prescale: float, postscale: float,
                    out: Optional[np.ndarray], asynchronous: bool) -> Any:
    """The allreduce of a numpy array over every rank in the fewest steps
    (a latency-bound call's time is mostly this front end's): the same
    checks and result as :func:`ring_strategy._core.arrays.allreduce`, or None, having
    queued nothing, for anything that path must look at (a strided or
    bfloat16 input, an ``out`` that is not a ready numpy array). A Handle
    when ``asynchronous``, else the result, waited for here."""
    code = _DTYPE_CODES.get(arr.dtype)
    if code is None or not arr.flags.c_contiguous:
        return None
    if out is None:
        out = np.empty(arr.shape, arr.dtype)
    elif not _out_ready(out, arr):
        return None
    name = _handles.auto_name("allreduce", name)
    if asynchronous:
        return Handle(_engine.submit(_engine.ALLREDUCE, name, arr, out, code, op=op, prescale=prescale,
                                     postscale=postscale), (arr, out), _handles.outputs_given(lambda _: out))
    _engine.submit(_engine.ALLREDUCE, name, arr, out, code, op=op, prescale=prescale, postscale=postscale, sync=True,
                   keep=(arr, out), results=False)
    return out


def allreduce(
    tensor: Any,
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    *,
    out: Optional[np.ndarray] = None,
    process_set: ProcessSet = global_process_set,
) -> np.ndarray:
    """Reduces ``tensor`` element-wise over the ranks of ``process_set``.

    Args:
        tensor: array of the same shape and dtype on every rank.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max``, ``Product`` or ``Adasum``
            (docs/adasum.md).
        name: unique name of this tensor while in flight; ranks match
            tensors by name (generated in call order when omitted).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
        out: where to write the result (same shape and dtype; may be
            ``tensor`` itself for an in-place reduction). A new array when
            omitted.
        process_set: the ranks taking part (default: every rank); this rank
            must be one of them.

    Returns:
        The reduced values (``out`` when given), identical on every rank of the set.
    """
    if process_set is global_process_set and tensor.__class__ is np.ndarray:
        done = _allreduce_lean(tensor, op, name, prescale_factor, postscale_factor, out, False)
        if done is not None:
            return done
    return _arrays.allreduce(tensor, op, name, prescale_factor, postscale_factor, False, out, process_set)


def grouped_allreduce_async(
    tensors: Sequence[Any],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    *,
    out: Optional[Sequence[np.ndarray]] = None,
    process_set: ProcessSet = global_process_set,
) -> Handle:
    """Starts reducing every array of ``tensors``; see :func:`grouped_allreduce`."""
    return _arrays.grouped_allreduce(tensors, op, name, prescale_factor, postscale_factor, True, process_set, out)


def grouped_allreduce(
    tensors: Sequence[Any],
    op: int = Average,
    name: Optional[str] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    *,
    out: Optional[Sequence[np.ndarray]] = None,
    process_set: ProcessSet = global_process_set,
) -> List[np.ndarray]:
    """Reduces every array of ``tensors`` over the ranks of ``process_set``,
    as one group submitted in one engine call (the engine fuses them where
    they fit), as Horovod's ``grouped_allreduce``.

    Args:
        tensors: a list of arrays; each of the same shape and dtype on every
            rank. Their dtypes may differ from each other.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max``, ``Product`` or ``Adasum``,
            for every array.
        name: the group's name; array ``i`` is named ``"<name>.<i>"``
            (generated in call order when omitted).
        prescale_factor: multiplies every input before the reduction.
        postscale_factor: multiplies every result after it.
        out: where to write the results, one array per tensor (same shape and
            dtype; ``tensors`` itself for an in-place reduction). New arrays
            when omitted.
        process_set: the ranks taking part (default: every rank).

    Returns:
        The reduced arrays, in order (``out`` when given).

    Raises:
        BadArgumentError: an array is invalid (naming it); no array is sent.
    """
    return _arrays.grouped_allreduce(tensors, op, name, prescale_factor, postscale_factor, False, process_set, out)


def allgather_async(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an allgather; see :func:`allgather`."""
    return _arrays.allgather(tensor, name, True, process_set)


def allgather(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank
    order (the ranks of ``process_set``, ascending). The first dimension may
    differ between ranks; the others must match."""
    return _arrays.allgather(tensor, name, False, process_set)


def broadcast_async(
    tensor: Any, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> Handle:
    """Starts a broadcast; see :func:`broadcast`."""
    return _arrays.broadcast(tensor, root_rank, name, True, process_set)


def broadcast(
    tensor: Any, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> np.ndarray:
    """Returns ``root_rank``'s ``tensor`` on every rank of ``process_set``
    (same shape and dtype everywhere). ``root_rank`` is a global rank in the set."""
    return _arrays.broadcast(tensor, root_rank, name, False, process_set)


def alltoall_async(
    tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
    process_set: ProcessSet = global_process_set,
) -> Handle:
    """Starts an alltoall; see :func:`alltoall`."""
    return _arrays.alltoall(tensor, splits, name, True, process_set)

def alltoall(
    tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
    process_set: ProcessSet = global_process_set,
) -> Any:
    """Scatters slices of ``tensor`` to every rank and gathers theirs.

    Args:
        tensor: array whose first dimension is split into consecutive blocks,
            block i going to the set's i-th rank.
        splits: rows sent to each rank of the set (sums to the first
            dimension); when omitted the first dimension is split evenly.
        name: unique name while in flight.
        process_set: the ranks taking part (default: every rank).

    Returns:
        The received rows in rank order; when ``splits`` was given, the tuple
        ``(output, received_splits)``, as Horovod returns it.
    """
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(
    tensor: Any, op: int = Average, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> Handle:
    """Starts a reducescatter; see :func:`reducescatter`."""
    return _arrays.reducescatter(tensor, op, name, True, process_set)

def reducescatter(
    tensor: Any, op: int = Average, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> np.ndarray:
    """Reduces ``tensor`` over the ranks of ``process_set`` and returns this
    rank's block of rows.

    The first dimension is split as evenly as possible; lower ranks of the
    set get one extra row when it does not divide by the set's size.
    """
    return synchronize(reducescatter_async(tensor, op, name, process_set))


def join() -> int:
    """Declares that this rank has no more data (Horovod's ``join``).

    Until every rank has joined, this rank takes part in the allreduces the
    others still submit on the global set, adding zeros (``Average`` still
    divides by ``size()``); other collectives raise ``BadArgumentError``
    meanwhile. Returns the rank that joined last, on every rank.
    """
    return _arrays.join()

def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier()``."""
    _arrays.barrier(process_set)
