"""The non-differentiable torch collectives: every ``*_async`` operation, the
in-place forms, and Horovod's integer handles, over the shared handle layer
(:mod:`ring_strategy._core.handles`) and argument rules (:mod:`ring_strategy._core.rules`).
The differentiable forms (:mod:`ring_strategy.torch.autograd`) are built on
these; :mod:`ring_strategy.torch.mpi_ops` gives both under Horovod's names.

Tensors cross into the engine through DLPack: a contiguous CPU tensor is read
(and, for the in-place ``*_`` forms, written) where it lies, without a copy.
Non-contiguous tensors are copied to a contiguous buffer first and, for the
in-place forms, the result is copied back. CUDA tensors go the same way
(with torch's current stream, which the engine waits for before reading
them) to the engine's GPU path: today the host-staged one (docs/gpu.md);
results the engine allocates (allgather, alltoall) are moved to the input's
device.

While ``torch.compile`` traces them, the synchronous in-place forms
(``allreduce_``, ``grouped_allreduce_``, ``broadcast_``) go through the custom
operators instead (:mod:`.compiled`); the ``_async`` forms break the graph.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch

from ring_strategy import ops as _core_ops
from ring_strategy._core import engine as _engine
from ring_strategy._core import handles as _handles
from ring_strategy._core.rules import (
    Average,
    Sum,
    alltoall_splits,
    check_op,
    check_sparse_op,
    check_root,
    handle_average_backwards_compatibility,
    reducescatter_rows,
    require_rows,
)
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.process_sets import ProcessSet, place_of, global_process_set
from ring_strategy.torch import compiled
from ring_strategy.torch.compiled import tracing

# ---------------------------------------------------------------- tensors in and out
_DTYPE_CODES = {
    getattr(torch, name): code for name, code in _engine.DTYPES.items()
}


def _checked(tensor: Any, what: str = "tensor") -> torch.Tensor:
    """``tensor`` detached from autograd, after checking it can be sent."""
    if not isinstance(tensor, torch.Tensor):
        raise BadArgumentError(f"{what} should be a torch.Tensor. Got: {type(tensor).__name__}")
    if not (tensor.is_cpu or tensor.is_cuda):
        raise BadArgumentError(
            f"{what} is on device '{tensor.device}': ring_strategy.torch handles CPU and CUDA tensors; "
            "move it with .cpu()"
        )
    if tensor.layout != torch.strided:
        raise BadArgumentError(f"{what} should be a dense (strided) tensor. Got layout: {tensor.layout}")
    if tensor.dtype not in _DTYPE_CODES:
        names = ", ".join(_engine.DTYPES)
        raise BadArgumentError(f"{what}: dtype should be one of {names}. Got: '{tensor.dtype}'")
    return tensor.detach() if tensor.requires_grad else tensor


def _contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself when the engine can read its values from its
    memory as they lie, else a contiguous copy of them: for a strided view,
    and for a view whose negation torch applies lazily (the negative bit),
    whose memory holds the values negated."""
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _stream(t: torch.Tensor) -> int:
    """The stream the engine waits for before reading ``t``: for a CUDA
    tensor, torch's current stream of its device (the work queued so far);
    0 for a CPU tensor."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _engine_view(t: Optional[torch.Tensor]) -> Any:
    """What the engine is handed for ``t`` (contiguous, or None): a CPU
    tensor as its host memory (address, nbytes, shape), which costs a
    fraction of a DLPack export; a CUDA tensor as itself (DLPack, which
    carries its device)."""
    if t is None or t.is_cuda:
        return t
    return (t.data_ptr(), t.nbytes, t.shape)


def _enqueue(kind: int, name: str, inp: torch.Tensor, out: Optional[torch.Tensor], **kw: Any) -> int:
    # inp and out are contiguous; the caller keeps them alive until the handle is released.
    return _engine.submit(kind, name, _engine_view(inp), _engine_view(out), _DTYPE_CODES[inp.dtype], shape=inp.shape,
                          stream=_stream(inp), **kw)[0]


def _enqueue_group(kind: int, names: List[str], bufs: List[torch.Tensor], outs: Optional[List[Optional[torch.Tensor]]],
                   **kw: Any) -> List[int]:
    """:func:`_enqueue` of every buffer, in one engine call (nothing is
    queued when one is refused)."""
    streams = [_stream(b) for b in bufs] if any(b.is_cuda for b in bufs) else ()
    return _engine.submit(kind, list(names), [_engine_view(b) for b in bufs],
                          None if outs is None else [_engine_view(o) for o in outs],
                          [_DTYPE_CODES[b.dtype] for b in bufs], stream=streams, **kw)


def _same_memory(tensor: torch.Tensor, buf: torch.Tensor) -> bool:
    """True when ``buf`` is ``tensor`` itself (it was contiguous), not a copy."""
    return buf.data_ptr() == tensor.data_ptr() and tensor.is_contiguous()


def _from_engine(result: tuple, like: torch.Tensor) -> torch.Tensor:
    """The engine-allocated output as a tensor of ``like``'s dtype on
    ``like``'s device: zero-copy from host memory to a CPU tensor and from
    the engine's GPU memory (NCCL) to a CUDA tensor; host memory to a CUDA
    tensor (host-staged) is copied."""
    data, shape, _ = result
    if data is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if not isinstance(data, np.ndarray):  # the engine's GPU memory (a DLPack array on the GPU)
        return torch.from_dlpack(data).view(like.dtype).reshape(shape)
    if data.size == 0:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    out = torch.from_numpy(data).view(like.dtype).reshape(shape)
    return out.to(like.device) if like.is_cuda else out


# ---------------------------------------------------------------- handles
# An operation is registered in the shared handle layer
# (_handles.register), whose number is Horovod's integer handle.
def poll(handle: int) -> bool:
    """True when the operation behind ``handle`` has finished, so that
    ``synchronize(handle)`` returns without blocking.

    Raises:
        BadArgumentError: the handle is unknown (or already synchronized).
        ShutdownError: the handle belongs to a world that ended with ``shutdown()``.
    """
    op = _handles.find(handle)
    if op is None:
        raise BadArgumentError(f"unknown handle {handle!r} (already synchronized?)")
    return _handles.poll(op)


def synchronize(handle: int) -> Any:
    """Waits for an asynchronous operation and returns its result.

    Returns the output tensor (the input tensor itself, filled, for in-place
    operations), a list of tensors for grouped operations, and
    ``(output, received_splits)`` for alltoall. Raises the operation's error
    (``MismatchError``, ``PeerFailureError``, ...), and ``ShutdownError`` for
    a handle of a world that ended with ``shutdown()``. As in Horovod, a
    handle that is unknown or already synchronized gives None.
    """
    op = _handles.find(handle)
    return None if op is None else _handles.synchronize(op)


# ---------------------------------------------------------------- allreduce
def _allreduce_group(tensors: Sequence[Any], label: str, name: Optional[str], op: int,
                     prescale_factor: float, postscale_factor: float,
                     process_set: ProcessSet, inplace: bool, grouped: bool, wake: bool = True) -> Any:
    """Queues the group; returns its integer handle, or with ``wake=False``
    (a synchronous call) waits for it here and returns its result."""
    ps = place_of(process_set).id  # the op is checked by the engine's door (_core.engine)
    bufs = [_contiguous(_checked(t)) for t in tensors]
    names = _handles.auto_names(label, name, ps, len(bufs), grouped)
    outs = bufs if inplace else [torch.empty_like(b) for b in bufs]
    copies = [(t, b) for t, b in zip(tensors, bufs) if not _same_memory(t, b)] if inplace else ()

    def finish(_results: Any) -> Any:
        if copies:
            with torch.no_grad():
                for t, b in copies:
                    t.copy_(b)
        if not grouped:
            return tensors[0] if inplace else outs[0]
        return list(tensors) if inplace else outs

    keep = (tuple(tensors), tuple(bufs), tuple(outs))
    kw = dict(op=op, prescale=prescale_factor, postscale=postscale_factor, process_set=ps, sync=not wake,
              keep=keep, results=False)
    if len(bufs) == 1 and not bufs[0].is_cuda:  # one engine call with few arguments
        submitted = _engine.submit(_engine.ALLREDUCE, names[0], _engine_view(bufs[0]), _engine_view(outs[0]),
                                   _DTYPE_CODES[bufs[0].dtype], **kw)
    else:
        submitted = _engine.submit(_engine.ALLREDUCE, list(names), [_engine_view(b) for b in bufs],
                                   [_engine_view(o) for o in outs], [_DTYPE_CODES[b.dtype] for b in bufs],
                                   stream=[_stream(b) for b in bufs] if any(b.is_cuda for b in bufs) else (), **kw)
    if wake:
        return _handles.register(submitted, keep, _handles.outputs_given(finish))
    return finish(None)


def allreduce_sync(tensor: torch.Tensor, name: Optional[str], op: int, prescale_factor: float,
                   postscale_factor: float, process_set: ProcessSet) -> torch.Tensor:
    """``synchronize(allreduce_async(...))`` without a handle in between:
    the result of reducing ``tensor`` (not modified) over ``process_set``."""
    return _allreduce_group([tensor], "allreduce", name, op, prescale_factor, postscale_factor, process_set,
                            inplace=False, grouped=False, wake=False)


def grouped_allreduce_sync(tensors: Sequence[torch.Tensor], name: Optional[str], op: int, prescale_factor: float,
                           postscale_factor: float, process_set: ProcessSet) -> List[torch.Tensor]:
    """``synchronize(grouped_allreduce_async(...))`` without a handle in
    between (the same generated names)."""
    return _allreduce_group(list(tensors), "grouped_allreduce", name, op, prescale_factor, postscale_factor,
                            process_set, inplace=False, grouped=True, wake=False)


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                    op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing ``tensor`` over all ranks; the input is not modified.

    Ranks match tensors by ``name`` (generated in call order when omitted);
    dtype and shape must agree on every rank.

    Args:
        tensor: a CPU tensor.
        average: deprecated; use ``op``.
        name: unique name while in flight.
        op: Average (default), Sum, Min, Max or Product. Integer Average
            divides with truncation toward zero.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
        process_set: the ranks taking part (default: every rank); this rank
            must be one of them.

    Returns:
        A handle for :func:`poll` and :func:`synchronize`.
    """
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_group([tensor], "allreduce", name, op, prescale_factor, postscale_factor,
                            process_set, inplace=False, grouped=False)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                     op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """In-place :func:`allreduce_async`: ``synchronize`` fills and returns ``tensor``."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_group([tensor], "allreduce", name, op, prescale_factor, postscale_factor,
                            process_set, inplace=True, grouped=False)


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` over all ranks in place and returns it; see :func:`allreduce_async`."""
    op = handle_average_backwards_compatibility(op, average)
    if tracing():
        return compiled.allreduce_(tensor, name, op, prescale_factor, postscale_factor, process_set)
    return _allreduce_group([tensor], "allreduce", name, op, prescale_factor, postscale_factor,
                            process_set, inplace=True, grouped=False, wake=False)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a list of tensors (each with the same op and factors);
    ``synchronize`` returns the list of results. Tensor ``i`` is named
    ``"<name>.<i>"``; the engine fuses the group where it fits."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_group(list(tensors), "grouped_allreduce", name, op, prescale_factor,
                            postscale_factor, process_set, inplace=False, grouped=True)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """In-place :func:`grouped_allreduce_async`: ``synchronize`` fills and returns the tensors."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_group(list(tensors), "grouped_allreduce", name, op, prescale_factor,
                            postscale_factor, process_set, inplace=True, grouped=True)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors in place and returns them."""
    op = handle_average_backwards_compatibility(op, average)
    if tracing():
        return compiled.grouped_allreduce_(tensors, name, op, prescale_factor, postscale_factor, process_set)
    return _allreduce_group(list(tensors), "grouped_allreduce", name, op, prescale_factor,
                            postscale_factor, process_set, inplace=True, grouped=True, wake=False)


# ---------------------------------------------------------------- allgather
def _allgather_group(tensors: Sequence[Any], label: str, name: Optional[str], process_set: ProcessSet,
                     grouped: bool) -> int:
    ps = place_of(process_set).id
    bufs = []
    for t in tensors:
        b = _contiguous(_checked(t))
        bufs.append(b.reshape(1) if b.dim() == 0 else b)
    names = _handles.auto_names(label, name, ps, len(bufs), grouped)
    ids = _enqueue_group(_engine.ALLGATHER, names, bufs, None, process_set=ps)
    def finish(results: list) -> Any:
        outs = [_from_engine(r, b) for r, b in zip(results, bufs)]
        return outs if grouped else outs[0]

    return _handles.register(ids, tuple(bufs), finish)


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts concatenating every rank's ``tensor`` along dimension 0, in rank
    order. The first dimension may differ between ranks; the others, and the
    dtype, must agree. A 0-d tensor counts as shape ``(1,)``."""
    return _allgather_group([tensor], "allgather", name, process_set, grouped=False)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts an allgather of each tensor in a list; ``synchronize`` returns the list."""
    return _allgather_group(list(tensors), "grouped_allgather", name, process_set, grouped=True)


# ---------------------------------------------------------------- broadcast
def _broadcast(tensor: Any, root_rank: int, name: Optional[str], process_set: ProcessSet, inplace: bool) -> int:
    ps = place_of(process_set).id
    root_rank = check_root(root_rank)
    buf = _contiguous(_checked(tensor))
    name = _handles.auto_name("broadcast", name, ps)
    out = buf if inplace else torch.empty_like(buf)
    hid = _enqueue(_engine.BROADCAST, name, buf, out, root=root_rank, process_set=ps)

    def finish(_results: list) -> torch.Tensor:
        if not inplace:
            return out
        if not _same_memory(tensor, buf):
            with torch.no_grad():
                tensor.copy_(buf)
        return tensor

    return _handles.register([hid], (tensor, buf, out), finish)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts sending ``root_rank``'s ``tensor`` to every rank; the input is not
    modified. Shape and dtype must agree on every rank."""
    return _broadcast(tensor, root_rank, name, process_set, inplace=False)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """In-place :func:`broadcast_async`: ``synchronize`` fills and returns ``tensor``."""
    return _broadcast(tensor, root_rank, name, process_set, inplace=True)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s on every rank and returns it."""
    if tracing():
        return compiled.broadcast_(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------- alltoall
def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts an alltoall: rows ``splits[r]`` of ``tensor`` (consecutive blocks
    along dimension 0) go to rank r; the rows received from every rank are
    concatenated in rank order. Without ``splits`` dimension 0 is split evenly.

    ``synchronize`` returns ``(output, received_splits)``, received_splits an
    int32 tensor (the dtype of ``splits`` when that is a tensor).
    """
    place = place_of(process_set)
    buf = _contiguous(_checked(tensor))
    require_rows("alltoall", buf.dim())
    splits_dtype = torch.int32
    if isinstance(splits, torch.Tensor):
        splits_dtype, splits = splits.dtype, splits.detach().cpu().tolist()
    split_list = alltoall_splits(splits, buf.shape[0], place.size)
    name = _handles.auto_name("alltoall", name, place.id)
    hid = _enqueue(_engine.ALLTOALL, name, buf, None, splits=split_list, process_set=place.id)

    def finish(results: list) -> tuple:
        return _from_engine(results[0], buf), torch.tensor(results[0][2], dtype=splits_dtype)

    return _handles.register([hid], (buf,), finish)


# ---------------------------------------------------------------- reducescatter
def _reducescatter_group(tensors: Sequence[Any], label: str, name: Optional[str], op: int,
                         process_set: ProcessSet, prescale_factor: float, postscale_factor: float,
                         grouped: bool) -> int:
    place = place_of(process_set)  # the op is checked by the engine's door (_core.engine)
    bufs = [_contiguous(_checked(t)) for t in tensors]
    for b in bufs:
        require_rows("reducescatter", b.dim())
    names = _handles.auto_names(label, name, place.id, len(bufs), grouped)
    outs = [torch.empty((reducescatter_rows(b.shape[0], place.size, place.rank),) + tuple(b.shape[1:]), dtype=b.dtype,
                        device=b.device)
            for b in bufs]
    ids = _enqueue_group(_engine.REDUCESCATTER, names, bufs, outs, op=op, prescale=prescale_factor,
                         postscale=postscale_factor, process_set=place.id)
    return _handles.register(ids, (tuple(bufs), tuple(outs)), lambda _r: outs if grouped else outs[0])


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> int:
    """Starts reducing ``tensor`` over all ranks and keeping this rank's block
    of rows. Dimension 0 is split as evenly as possible; lower ranks get one
    extra row when it does not divide by ``size()``."""
    return _reducescatter_group([tensor], "reducescatter", name, op, process_set, prescale_factor,
                                postscale_factor, grouped=False)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None, op: int = Average,
                                process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter of each tensor in a list; ``synchronize`` returns the list."""
    return _reducescatter_group(list(tensors), "grouped_reducescatter", name, op, process_set, prescale_factor,
                                postscale_factor, grouped=True)


# ---------------------------------------------------------------- sparse
def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: int,
                           process_set: ProcessSet = global_process_set) -> Callable[[], torch.Tensor]:
    """Starts reducing a sparse COO tensor by gathering every rank's indices
    and values. Used by DistributedOptimizer for sparse gradients.

    Returns:
        A function that waits for the reduction and returns the
        (uncoalesced) sparse sum, divided by the process set's size for
        Average; later calls return the same tensor.
    """
    op = check_op(op)
    check_sparse_op(op)
    members = place_of(process_set).size
    if op not in (Sum, Average):
        raise BadArgumentError(f"sparse allreduce supports op=Sum or op=Average. Got: {op!r}")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    idx = allgather_async(t._indices().transpose(0, 1).contiguous(), name=f"{name}.indices", process_set=process_set)
    val = allgather_async(t._values(), name=f"{name}.values", process_set=process_set)
    parts = [_handles.take(idx), _handles.take(val)]

    def finish(results: list) -> torch.Tensor:
        indices = parts[0].finish(results[:1])
        values = parts[1].finish(results[1:])
        if op == Average:
            values = values / members
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(), check_invariants=False)

    handle = _handles.register(parts[0].ids + parts[1].ids, (t, parts[0].keep, parts[1].keep), finish)
    result: List[torch.Tensor] = []

    def wait() -> torch.Tensor:
        if not result:
            result.append(synchronize(handle))
        return result[0]

    return wait


# ---------------------------------------------------------------- join, barrier
def join(device: int = -1) -> int:
    """Declares that this rank has run out of data, as Horovod's ``join``.

    Until every rank has joined, this rank takes part in the allreduces the
    others still submit (DistributedOptimizer's gradients included) by adding
    zeros; ``Average`` still divides by ``size()``. Other collectives raise
    ``BadArgumentError`` while a rank has joined. Returns the rank that joined
    last. ``device`` is accepted for compatibility and ignored.
    """
    return _core_ops.join()


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier()``."""
    _core_ops.barrier(process_set)
