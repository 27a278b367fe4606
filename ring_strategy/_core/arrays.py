"""Layer 7 of the core: collectives on arrays, for every front end that
hands the engine arrays rather than its own tensors.

An array is a numpy array, or any array that speaks DLPack: read in place
(zero-copy when C-contiguous), or for an array on a CUDA GPU (cupy's, or
any whose DLPack device is CUDA) taken as a cupy view
(:mod:`ring_strategy._core.gpu_arrays`). Results are new numpy arrays, or
cupy arrays for GPU inputs. The numpy API (:mod:`ring_strategy.ops`) is
these functions under Horovod's names; TensorFlow's and Keras's host
fallbacks and the fused buffers of :mod:`ring_strategy._fused` reduce
their numpy arrays with :func:`allreduce_group`.

Contracts:

- Each collective checks its ``process_set`` (:func:`place_of`), names
  its operation (:mod:`~ring_strategy._core.handles`) and submits once
  (:func:`ring_strategy._core.engine.submit`): one call here enters each
  lower core module at most once.
- ``asynchronous=True`` returns a :class:`Handle` at once; otherwise the
  call waits and returns the result.
- A bad argument raises ``BadArgumentError`` before anything is queued.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ring_strategy._core import engine, handles
from ring_strategy._core import gpu_arrays as gpu
from ring_strategy._core.registry import ProcessSet, global_process_set, place_of
from ring_strategy._core.rules import alltoall_splits, reducescatter_rows, require_rows
from ring_strategy.exceptions import BadArgumentError

__all__ = ["Handle", "DTYPE_CODES", "out_ready", "allreduce", "allreduce_group", "grouped_allreduce", "allgather",
           "broadcast", "alltoall", "reducescatter", "join", "barrier"]

# numpy dtype -> engine dtype code; bfloat16 (ml_dtypes) is found by name.
DTYPE_CODES = {np.dtype(name): code for name, code in engine.DTYPES.items() if name != "bfloat16"}
_BFLOAT16 = engine.DTYPES["bfloat16"]


class Handle(handles.Operation):
    """An operation in flight. Its arrays stay alive until it is synchronized
    (or, if the Handle is dropped first, until the engine is done with them).

    A Handle belongs to the world (``init()`` to ``shutdown()``) it was made
    in: once a new world has started, :func:`~ring_strategy.ops.poll` and
    :func:`~ring_strategy.ops.synchronize` of it raise ``ShutdownError``
    naming it.
    """

    __slots__ = ()

    def __del__(self) -> None:
        if _abandon is not None:  # None while the interpreter exits
            _abandon(self)

    def __repr__(self) -> str:
        return f"Handle({self.number})"


_abandon = handles.abandon


# ---------------------------------------------------------------- arrays as the engine takes them
def _as_array(x: Any) -> np.ndarray:
    """A C-contiguous numpy view of x (a copy only when x is strided); for an
    array on a CUDA GPU, a cupy view."""
    if isinstance(x, np.ndarray):
        arr = x
    elif gpu.is_gpu(x):
        return gpu.as_gpu(x)
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
    code = DTYPE_CODES.get(arr.dtype)  # fast path: a dict hit, no dtype.name
    if code is not None:
        return code
    if arr.dtype.name == "bfloat16":
        return _BFLOAT16
    supported = ", ".join(engine.DTYPES)
    raise BadArgumentError(f"dtype should be one of {supported}. Got: '{arr.dtype}'")


def _dtype_codes(arrs: Sequence[Any], names: Sequence[str]) -> List[int]:
    """:func:`_dtype_code` of each array; BadArgumentError naming the first
    array (by ``names``) whose dtype the engine does not take."""
    codes = [DTYPE_CODES.get(a.dtype) for a in arrs]  # fast path: dict hits
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


def _empty_like(arr: Any) -> Any:
    if arr.__class__ is np.ndarray:
        return np.empty(arr.shape, arr.dtype)  # C-contiguous like arr; twice as fast as np.empty_like
    return np.empty_like(arr) if isinstance(arr, np.ndarray) else gpu.empty_like(arr)


def out_ready(out: Any, arr: np.ndarray) -> bool:
    """True when ``out`` is a numpy array that takes a result shaped like
    ``arr`` as it is (carray: C-contiguous, aligned, writeable): the
    common case, in one test."""
    return out.__class__ is np.ndarray and out.shape == arr.shape and out.dtype == arr.dtype and out.flags.carray


def _check_out(out: Any, arr: np.ndarray) -> np.ndarray:
    """``out`` if it can receive a result shaped like ``arr``, else BadArgumentError."""
    if out_ready(out, arr):
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


def _check_outs(out: Sequence[Any], arrs: Sequence[Any]) -> List[Any]:
    """``out`` if it holds one valid output (see :func:`_check_out`) per array."""
    if not isinstance(out, (list, tuple)) or len(out) != len(arrs):
        raise BadArgumentError(f"out should be a list of {len(arrs)} arrays, one per tensor. Got: {type(out).__name__}"
                               + (f" of {len(out)}" if isinstance(out, (list, tuple)) else ""))
    return [_check_out(o, a) for o, a in zip(out, arrs)]


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
            return gpu.result(data, like, shape)

    return finish


def _submit(kind: int, label: str, arr: np.ndarray, out: Optional[np.ndarray], name: Optional[str],
            finish: Callable[[List[tuple]], Any], asynchronous: bool, set_id: int = 0, **kw: Any) -> Any:
    """Queues one engine operation on ``arr`` (and ``out``; None: the engine
    allocates) on the set with engine id ``set_id``; ``finish`` turns its
    results into what synchronize() returns. Returns a Handle, or unless
    ``asynchronous`` waits for it here and returns that result. ``kw``:
    :func:`engine.submit`'s op, root, prescale, postscale, splits."""
    code = _dtype_code(arr)
    stream = 0 if arr.__class__ is np.ndarray else gpu.stream_of(arr)
    ein, eout = arr, out  # what the engine sees: bfloat16 as its uint16 bits
    if code == _BFLOAT16:
        ein, eout = _raw(arr, code), None if out is None else _raw(out, code)
    name = handles.auto_name(label, name, set_id)
    if asynchronous:
        ids = engine.submit(kind, name, ein, eout, code, process_set=set_id, stream=stream, shape=arr.shape, **kw)
        return Handle(ids, (arr, out), finish)
    return finish(engine.submit(kind, name, ein, eout, code, process_set=set_id, stream=stream, shape=arr.shape,
                                sync=True, keep=(arr, out), results=getattr(finish, "needs_results", True), **kw))


# ---------------------------------------------------------------- the collectives
def allreduce(tensor: Any, op: Any, name: Optional[str], prescale: float, postscale: float, asynchronous: bool,
              out: Optional[Any] = None, process_set: ProcessSet = global_process_set) -> Any:
    """Reduces ``tensor`` over the set into ``out`` (a new array when None)."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    out = _empty_like(arr) if out is None else _check_out(out, arr)
    return _submit(engine.ALLREDUCE, "allreduce", arr, out, name, handles.outputs_given(lambda _: out), asynchronous,
                   place.id, op=op, prescale=prescale, postscale=postscale)


def allreduce_group(tensors: Sequence[Any], names: Sequence[str], op: Any, prescale: float, postscale: float,
                    process_set: ProcessSet = global_process_set, *, out: Optional[Sequence[Any]] = None,
                    asynchronous: bool = False) -> Any:
    """Reduces every array of ``tensors`` (``tensors[i]`` named
    ``names[i]``) in one engine call: the list of results (``out``, when
    given: where each result goes), or a Handle whose synchronize() returns
    it. Dtypes may differ; a bad member queues nothing."""
    return _allreduce_group(tensors, names, op, prescale, postscale, place_of(process_set).id, out, asynchronous)


def _allreduce_group(tensors: Sequence[Any], names: Sequence[str], op: Any, prescale: float, postscale: float,
                     set_id: int, out: Optional[Sequence[Any]], asynchronous: bool) -> Any:
    """:func:`allreduce_group` on the set with engine id ``set_id``."""
    if all(t.__class__ is np.ndarray for t in tensors):  # the common case, kept lean: < 1 us a tensor in all
        arrs = [t if t.flags.c_contiguous else t.copy(order="C") for t in tensors]
        outs = [np.empty(a.shape, a.dtype) for a in arrs] if out is None else _check_outs(out, arrs)
        streams: Sequence[int] = ()
    else:
        arrs = [_as_array(t) for t in tensors]
        outs = [_empty_like(a) for a in arrs] if out is None else _check_outs(out, arrs)
        streams = [0 if isinstance(a, np.ndarray) else gpu.stream_of(a) for a in arrs]
    codes = _dtype_codes(arrs, names)
    ins, raw_outs = arrs, outs
    if _BFLOAT16 in codes:
        ins = [_raw(a, c) for a, c in zip(arrs, codes)]
        raw_outs = [_raw(o, c) for o, c in zip(outs, codes)]
    keep = (arrs, outs)
    submitted = engine.submit(engine.ALLREDUCE, list(names), ins, raw_outs, codes, op=op, prescale=prescale,
                              postscale=postscale, process_set=set_id, stream=streams, sync=not asynchronous,
                              keep=keep, results=False)
    return Handle(submitted, keep, handles.outputs_given(lambda _: outs)) if asynchronous else outs


def grouped_allreduce(tensors: Sequence[Any], op: Any, name: Optional[str], prescale: float, postscale: float,
                      asynchronous: bool, process_set: ProcessSet = global_process_set,
                      out: Optional[Sequence[Any]] = None) -> Any:
    """:func:`allreduce_group` under the group's name (``"<name>.<i>"``, generated when None)."""
    if not isinstance(tensors, (list, tuple)):
        raise BadArgumentError(f"tensors should be a list of arrays. Got: {type(tensors).__name__}")
    set_id = place_of(process_set).id
    names = handles.auto_names("grouped_allreduce", name, set_id, len(tensors), True)
    return _allreduce_group(tensors, names, op, prescale, postscale, set_id, out, asynchronous)


def allgather(tensor: Any, name: Optional[str], asynchronous: bool,
              process_set: ProcessSet = global_process_set) -> Any:
    """Every rank's rows, in the set's rank order (a 0-d array counts as one row)."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    return _submit(engine.ALLGATHER, "allgather", arr, None, name, _from_engine(arr), asynchronous, place.id)


def broadcast(tensor: Any, root_rank: Any, name: Optional[str], asynchronous: bool,
              process_set: ProcessSet = global_process_set) -> Any:
    """``root_rank``'s array on every rank of the set, in a new array."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    out = _empty_like(arr)
    return _submit(engine.BROADCAST, "broadcast", arr, out, name, handles.outputs_given(lambda _: out), asynchronous,
                   place.id, root=root_rank)


def alltoall(tensor: Any, splits: Optional[Sequence[int]], name: Optional[str], asynchronous: bool,
             process_set: ProcessSet = global_process_set) -> Any:
    """The rows each rank sent this one; with ``splits`` given, ``(rows, received splits)``."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    require_rows("alltoall", arr.ndim, "array")
    want_splits = splits is not None
    splits = alltoall_splits(splits, arr.shape[0], place.size)
    rows = _from_engine(arr)

    def finish(results):
        out = rows(results)
        return (out, np.asarray(results[0][2], dtype=np.int32)) if want_splits else out

    return _submit(engine.ALLTOALL, "alltoall", arr, None, name, finish, asynchronous, place.id, splits=splits)


def reducescatter(tensor: Any, op: Any, name: Optional[str], asynchronous: bool,
                  process_set: ProcessSet = global_process_set) -> Any:
    """This rank's block of rows of the reduction (lower ranks get the extra rows)."""
    place = place_of(process_set)
    arr = _as_array(tensor)
    require_rows("reducescatter", arr.ndim, "array")
    rows = reducescatter_rows(arr.shape[0], place.size, place.rank)
    shape = (rows,) + arr.shape[1:]
    out = np.empty(shape, dtype=arr.dtype) if isinstance(arr, np.ndarray) else gpu.empty(shape, arr)
    return _submit(engine.REDUCESCATTER, "reducescatter", arr, out, name, lambda _: out, asynchronous, place.id, op=op)


def join() -> int:
    """Horovod's ``join``, waited for here: the rank that joined last."""
    token = np.zeros(1, dtype=np.uint8)
    return _submit(engine.JOIN, "join", token, None, "join", lambda results: int(results[0][2][0]), False)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank of the set has called it."""
    place = place_of(process_set)
    token = np.zeros(1, dtype=np.uint8)
    _submit(engine.BARRIER, "barrier", token, None, None, lambda _: None, False, place.id)
