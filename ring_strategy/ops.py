"""Collective operations on numpy arrays and other arrays that speak DLPack.
Inputs are read in place (zero-copy when C-contiguous); results are new
numpy arrays. Arrays on a CUDA GPU (cupy's, or any whose DLPack device is
CUDA) go to the engine's GPU path and give cupy results
(:mod:`ring_strategy._gpu_arrays`).

Every operation has an ``*_async`` form that returns a :class:`Handle`
immediately; :func:`synchronize` waits for it and returns the result,
:func:`poll` tells whether it is done.

A front end like the others, on the core (:mod:`ring_strategy._core`): it
turns arrays into what the engine takes and names things as Horovod does;
the core checks sets, names operations, submits and waits.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ring_strategy import _gpu_arrays as _gpu
from ring_strategy import _native
from ring_strategy._core import engine as _engine
from ring_strategy._core import handles as _handles
from ring_strategy._core.registry import ProcessSet, global_process_set, place_of
from ring_strategy._core.rules import (  # noqa: F401  (the reduction ops are part of this API)
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    alltoall_splits,
    reducescatter_rows,
    require_rows,
)
from ring_strategy.exceptions import BadArgumentError

_DTYPE_CODES = {
    np.dtype(name): code for name, code in _native.DTYPES.items() if name != "bfloat16"
}
_BFLOAT16 = _native.DTYPES["bfloat16"]


class Handle(_handles.Operation):
    """An operation in flight. Its arrays stay alive until it is synchronized
    (or, if the Handle is dropped first, until the engine is done with them).

    A Handle belongs to the world (``init()`` to ``shutdown()``) it was made
    in: once a new world has started, :func:`poll` and :func:`synchronize`
    of it raise ``ShutdownError`` naming it.
    """

    __slots__ = ()

    def __del__(self) -> None:
        if _abandon is not None:  # None while the interpreter exits
            _abandon(self)

    def __repr__(self) -> str:
        return f"Handle({self.number})"


_abandon = _handles.abandon


def _as_array(x: Any) -> np.ndarray:
    """A C-contiguous numpy view of x (a copy only when x is strided); for an
    array on a CUDA GPU, a cupy view."""
    if isinstance(x, np.ndarray):
        arr = x
    elif _gpu.is_gpu(x):
        return _gpu.as_gpu(x)
    elif hasattr(x, "__dlpack__") and not isinstance(x, np.generic):
        try:
            arr = np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError) as e:
            raise BadArgumentError(f"cannot read {type(x).__name__} through DLPack: {e}") from e
    else:
        arr = np.asarray(x)
    # np.ascontiguousarray would turn a 0-d array into shape (1,).
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _dtype_code(arr: np.ndarray) -> int:
    code = _DTYPE_CODES.get(arr.dtype)  # fast path: a dict hit, no dtype.name
    if code is not None:
        return code
    if arr.dtype.name == "bfloat16":
        return _BFLOAT16
    supported = ", ".join(_native.DTYPES)
    raise BadArgumentError(f"dtype should be one of {supported}. Got: '{arr.dtype}'")


def _dtype_codes(arrs: Sequence[Any], names: Sequence[str]) -> List[int]:
    """:func:`_dtype_code` of each array; BadArgumentError naming the first
    array (by ``names``) whose dtype the engine does not take."""
    codes = [_DTYPE_CODES.get(a.dtype) for a in arrs]  # fast path: dict hits
    if None in codes:
        for i, code in enumerate(codes):
            if code is None:
                try:
                    codes[i] = _dtype_code(arrs[i])
                except BadArgumentError as e:
                    raise BadArgumentError(f"tensor '{names[i]}': {e}") from None
    return codes


def _raw(arr: np.ndarray, code: int) -> np.ndarray:
    """The array as the engine sees it (bfloat16 travels as uint16 bits)."""
    return arr.view(np.uint16) if code == _BFLOAT16 else arr


def _submit(
    kind: int,
    label: str,
    arr: np.ndarray,
    out: Optional[np.ndarray],
    name: Optional[str],
    finish: Callable[[List[tuple]], Any],
    op: int = Sum,
    root: int = 0,
    prescale: float = 1.0,
    postscale: float = 1.0,
    splits: Sequence[int] = (),
    asynchronous: bool = True,
    process_set: int = 0,
) -> Any:
    """Queues one engine operation on ``arr`` (and ``out``, None: the engine
    allocates) on the set with engine id ``process_set``; ``finish`` turns
    its results into what synchronize() returns. Returns a Handle, or
    unless ``asynchronous`` waits for it here and returns that result."""
    code = _dtype_code(arr)
    stream = 0 if arr.__class__ is np.ndarray else _gpu.stream_of(arr)
    ein, eout = arr, out  # what the engine sees: bfloat16 as its uint16 bits
    if code == _BFLOAT16:
        ein, eout = _raw(arr, code), None if out is None else _raw(out, code)
    name = _handles.auto_name(label, name, process_set)
    kw = dict(op=op, root=root, prescale=prescale, postscale=postscale, splits=splits, process_set=process_set,
              stream=stream, shape=arr.shape)
    if asynchronous:
        return Handle(_engine.submit(kind, name, ein, eout, code, **kw), (arr, out), finish)
    return finish(_engine.submit(kind, name, ein, eout, code, sync=True, keep=(arr, out),
                                 results=getattr(finish, "needs_results", True), **kw))


def _from_engine(like: Any) -> Callable[[List[tuple]], np.ndarray]:
    """Turns an engine-allocated result into an array of ``like``'s dtype
    and kind (numpy, or cupy for a GPU input)."""
    dtype = like.dtype
    if isinstance(like, np.ndarray):
        def finish(results):
            data, shape, _ = results[0]
            return data.view(dtype).reshape(shape)
    else:
        def finish(results):
            data, shape, _ = results[0]
            return _gpu.result(data, like, shape)

    return finish


def _empty_like(arr: Any) -> Any:
    if arr.__class__ is np.ndarray:
        return np.empty(arr.shape, arr.dtype)  # C-contiguous like arr; twice as fast as np.empty_like
    return np.empty_like(arr) if isinstance(arr, np.ndarray) else _gpu.empty_like(arr)


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
    return _allreduce(tensor, op, name, prescale_factor, postscale_factor, True, out, process_set)


def _out_ready(out: Any, arr: np.ndarray) -> bool:
    """True when ``out`` is a numpy array that takes a result shaped like
    ``arr`` as it is (carray: C-contiguous, aligned, writeable): the
    common case, in one test."""
    return out.__class__ is np.ndarray and out.shape == arr.shape and out.dtype == arr.dtype and out.flags.carray


def _check_out(out: Any, arr: np.ndarray) -> np.ndarray:
    """``out`` if it can receive a result shaped like ``arr``, else BadArgumentError."""
    if _out_ready(out, arr):
        return out
    if not isinstance(arr, np.ndarray):  # a GPU input: out is an array of the same kind
        if type(out) is not type(arr) or out.shape != arr.shape or out.dtype != arr.dtype:
            raise BadArgumentError(f"out should be a {type(arr).__name__} of shape {arr.shape} and dtype "
                                   f"{arr.dtype} on the input's GPU. Got: {type(out).__name__}")
        return out
    if not isinstance(out, np.ndarray) or out.shape != arr.shape or out.dtype != arr.dtype:
        got = f"{type(out).__name__} {getattr(out, 'shape', '')} {getattr(out, 'dtype', '')}".rstrip()
        raise BadArgumentError(f"out should be a numpy array of shape {arr.shape} and dtype {arr.dtype}. Got: {got}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise BadArgumentError("out should be a writeable C-contiguous numpy array")
    return out


def _allreduce(
    tensor: Any, op: int, name: Optional[str], prescale: float, postscale: float, asynchronous: bool,
    out: Optional[np.ndarray] = None, process_set: ProcessSet = global_process_set,
) -> Handle:
    place = place_of(process_set)
    arr = _as_array(tensor)
    out = _empty_like(arr) if out is None else _check_out(out, arr)
    return _submit(
        _native.OP_ALLREDUCE, "allreduce", arr, out, name, _handles.outputs_given(lambda _: out),
        op=op, prescale=prescale, postscale=postscale, asynchronous=asynchronous, process_set=place.id,
    )


def _allreduce_lean(arr: np.ndarray, op: int, name: Optional[str], prescale: float, postscale: float,
                    out: Optional[np.ndarray], asynchronous: bool) -> Any:
    """The allreduce of a numpy array over every rank in the fewest steps
    (a latency-bound call's time is mostly this front end's): the same
    checks and result as :func:`_allreduce`'s general path, or None, having
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
    return _allreduce(tensor, op, name, prescale_factor, postscale_factor, False, out, process_set)


def _allreduce_group(tensors: Sequence[Any], names: Sequence[str], op: int, prescale: float, postscale: float,
                     asynchronous: bool, process_set: ProcessSet, out: Optional[Sequence[Any]] = None) -> Handle:
    """Queues the allreduce of every array of ``tensors`` (``tensors[i]``
    named ``names[i]``) in one engine call; synchronize() returns the list of
    results (``out``, when given: where each result goes). Dtypes may differ;
    a bad member queues nothing. The grouped
    allreduce of every front end that hands the engine host arrays (this
    module's, TensorFlow's, MXNet's, the fused buffers of :mod:`_fused`)."""
    place = place_of(process_set)
    if all(t.__class__ is np.ndarray for t in tensors):  # the common case, kept lean: < 1 us a tensor in all
        arrs = [t if t.flags.c_contiguous else t.copy(order="C") for t in tensors]
        outs = [np.empty(a.shape, a.dtype) for a in arrs] if out is None else _check_outs(out, arrs)
        streams: Sequence[int] = ()
    else:
        arrs = [_as_array(t) for t in tensors]
        outs = [_empty_like(a) for a in arrs] if out is None else _check_outs(out, arrs)
        streams = [0 if isinstance(a, np.ndarray) else _gpu.stream_of(a) for a in arrs]
    codes = _dtype_codes(arrs, names)
    ins, raw_outs = arrs, outs
    if _BFLOAT16 in codes:
        ins = [_raw(a, c) for a, c in zip(arrs, codes)]
        raw_outs = [_raw(o, c) for o, c in zip(outs, codes)]
    keep = (arrs, outs)
    submitted = _engine.submit(_engine.ALLREDUCE, list(names), ins, raw_outs, codes, op=op, prescale=prescale,
                               postscale=postscale, process_set=place.id, stream=streams, sync=not asynchronous,
                               keep=keep, results=False)
    return Handle(submitted, keep, _handles.outputs_given(lambda _: outs)) if asynchronous else outs


def _check_outs(out: Sequence[Any], arrs: Sequence[Any]) -> List[Any]:
    """``out`` if it holds one valid output (see :func:`_check_out`) per array."""
    if not isinstance(out, (list, tuple)) or len(out) != len(arrs):
        raise BadArgumentError(f"out should be a list of {len(arrs)} arrays, one per tensor. Got: {type(out).__name__}"
                               + (f" of {len(out)}" if isinstance(out, (list, tuple)) else ""))
    return [_check_out(o, a) for o, a in zip(out, arrs)]


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
    return _grouped(tensors, op, name, prescale_factor, postscale_factor, True, process_set, out)


def _grouped(tensors: Sequence[Any], op: int, name: Optional[str], prescale: float, postscale: float,
             asynchronous: bool,
             process_set: ProcessSet, out: Optional[Sequence[Any]] = None) -> Handle:
    if not isinstance(tensors, (list, tuple)):
        raise BadArgumentError(f"tensors should be a list of arrays. Got: {type(tensors).__name__}")
    names = _handles.auto_names("grouped_allreduce", name, place_of(process_set).id, len(tensors), True)
    return _allreduce_group(tensors, names, op, prescale, postscale, asynchronous,
                            process_set, out)


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
    return _grouped(tensors, op, name, prescale_factor, postscale_factor, False, process_set, out)


def allgather_async(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an allgather; see :func:`allgather`."""
    return _allgather(tensor, name, True, process_set)


def _allgather(tensor: Any, name: Optional[str], asynchronous: bool, process_set: ProcessSet) -> Handle:
    place = place_of(process_set)
    arr = _as_array(tensor)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    return _submit(
        _native.OP_ALLGATHER, "allgather", arr, None, name, _from_engine(arr), asynchronous=asynchronous,
        process_set=place.id,
    )


def allgather(tensor: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank
    order (the ranks of ``process_set``, ascending). The first dimension may
    differ between ranks; the others must match."""
    return _allgather(tensor, name, False, process_set)


def broadcast_async(
    tensor: Any, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> Handle:
    """Starts a broadcast; see :func:`broadcast`."""
    return _broadcast(tensor, root_rank, name, True, process_set)


def _broadcast(tensor: Any, root_rank: int, name: Optional[str], asynchronous: bool,
               process_set: ProcessSet) -> Handle:
    place = place_of(process_set)
    arr = _as_array(tensor)
    out = _empty_like(arr)
    return _submit(
        _native.OP_BROADCAST, "broadcast", arr, out, name, _handles.outputs_given(lambda _: out), root=root_rank,
        asynchronous=asynchronous, process_set=place.id,
    )


def broadcast(
    tensor: Any, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set
) -> np.ndarray:
    """Returns ``root_rank``'s ``tensor`` on every rank of ``process_set``
    (same shape and dtype everywhere). ``root_rank`` is a global rank in the set."""
    return _broadcast(tensor, root_rank, name, False, process_set)


def alltoall_async(
    tensor: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
    process_set: ProcessSet = global_process_set,
) -> Handle:
    """Starts an alltoall; see :func:`alltoall`."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    require_rows("alltoall", arr.ndim, "array")
    want_splits = splits is not None
    splits = alltoall_splits(splits, arr.shape[0], place.size)
    engine = _from_engine(arr)

    def finish(results):
        out = engine(results)
        return (out, np.asarray(results[0][2], dtype=np.int32)) if want_splits else out

    return _submit(_native.OP_ALLTOALL, "alltoall", arr, None, name, finish, splits=splits, process_set=place.id)


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
    place = place_of(process_set)
    arr = _as_array(tensor)
    require_rows("reducescatter", arr.ndim, "array")
    rows = reducescatter_rows(arr.shape[0], place.size, place.rank)
    shape = (rows,) + arr.shape[1:]
    out = np.empty(shape, dtype=arr.dtype) if isinstance(arr, np.ndarray) else _gpu.empty(shape, arr)
    return _submit(
        _native.OP_REDUCESCATTER, "reducescatter", arr, out, name, lambda _: out, op=op, process_set=place.id
    )


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
    token = np.zeros(1, dtype=np.uint8)
    return _submit(_native.OP_JOIN, "join", token, None, "join", lambda results: int(results[0][2][0]),
                   asynchronous=False)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier()``."""
    place = place_of(process_set)
    token = np.zeros(1, dtype=np.uint8)
    _submit(_native.OP_BARRIER, "barrier", token, None, None, lambda _: None, asynchronous=False,
            process_set=place.id)
