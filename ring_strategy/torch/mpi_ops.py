"""Horovod-compatible collectives on torch tensors (the non-differentiable core).

Names, arguments and defaults follow ``horovod.torch.mpi_ops`` (Horovod 0.28).
Every ``*_async`` function returns an integer handle at once; ``synchronize``
waits for it and returns the result, ``poll`` tells whether it is done.

Tensors cross into the engine through DLPack: a contiguous CPU tensor is read
(and, for the in-place ``*_`` forms, written) where it lies, without a copy.
Non-contiguous tensors are copied to a contiguous buffer first and, for the
in-place forms, the result is copied back. Only CPU tensors are accepted:
this build has no GPU path.

The differentiable forms (``allreduce``, ``allgather``, ``broadcast``,
``alltoall``, ``reducescatter`` and their grouped forms) live in
:mod:`ring_strategy.torch.autograd` and are re-exported here.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import Any, Callable, List, Optional, Sequence

import torch

from ring_strategy import _frontend
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
from ring_strategy.exceptions import BadArgumentError, RingError
from ring_strategy.torch.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet,
    _check_process_set,
    add_process_set,
    global_process_set,
    remove_process_set,
)

# ---------------------------------------------------------------- build queries
# Truthful for this build: one native engine over shared memory and TCP; no
# MPI, Gloo, NCCL, DDL, oneCCL, CUDA or ROCm inside.


def mpi_built() -> bool:
    """False: ring does not use MPI (it can still be launched by mpirun)."""
    return False


def mpi_enabled() -> bool:
    """False: collectives never run over MPI."""
    return False


def mpi_threads_supported() -> bool:
    """False: there is no MPI."""
    return False


def gloo_built() -> bool:
    """False: ring has its own engine instead of Gloo."""
    return False


def gloo_enabled() -> bool:
    """False: collectives never run over Gloo."""
    return False


def nccl_built() -> bool:
    """False: this build has no NCCL path."""
    return False


def ddl_built() -> bool:
    """False."""
    return False


def ccl_built() -> bool:
    """False."""
    return False


def cuda_built() -> bool:
    """False: this build handles CPU tensors only."""
    return False


def rocm_built() -> bool:
    """False: this build handles CPU tensors only."""
    return False


# ---------------------------------------------------------------- reduction ops
Sum = _frontend.REDUCE_OPS["Sum"]
Average = _frontend.REDUCE_OPS["Average"]
Min = _frontend.REDUCE_OPS["Min"]
Max = _frontend.REDUCE_OPS["Max"]
Product = _frontend.REDUCE_OPS["Product"]
# Accepted as a name so Horovod scripts import; using it raises NotImplementedError.
Adasum = max(_frontend.REDUCE_OPS.values()) + 100


def handle_average_backwards_compatibility(op: Optional[int], average: Optional[bool]) -> int:
    """Resolves Horovod's deprecated ``average=`` flag against ``op``.

    Returns ``op`` when given; otherwise Average, or Sum for ``average=False``
    (with a DeprecationWarning). Giving both is a ValueError.
    """
    if op is not None:
        if average is not None:
            raise BadArgumentError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed in a future version",
            DeprecationWarning,
            stacklevel=3,
        )
        return Average if average else Sum
    return Average


def _check_op(op: Any) -> int:
    if op == Adasum and not isinstance(op, bool):
        raise NotImplementedError(
            "op=Adasum is not implemented in ring yet; use op=Average (the default) or op=Sum"
        )
    return _frontend.check_op(op)


# ---------------------------------------------------------------- tensors in and out
_DTYPE_CODES = {
    getattr(torch, name): code for name, code in _frontend.DTYPES.items()
}


def _checked(tensor: Any, what: str = "tensor") -> torch.Tensor:
    """``tensor`` detached from autograd, after checking it can be sent."""
    if not isinstance(tensor, torch.Tensor):
        raise BadArgumentError(f"{what} should be a torch.Tensor. Got: {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise BadArgumentError(
            f"{what} is on device '{tensor.device}': ring_strategy.torch handles CPU tensors only "
            "(this build has no GPU path); move it with .cpu()"
        )
    if tensor.layout != torch.strided:
        raise BadArgumentError(f"{what} should be a dense (strided) tensor. Got layout: {tensor.layout}")
    if tensor.dtype not in _DTYPE_CODES:
        names = ", ".join(_frontend.DTYPES)
        raise BadArgumentError(f"{what}: dtype should be one of {names}. Got: '{tensor.dtype}'")
    return tensor.detach()


def _contiguous(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _enqueue(kind: int, name: str, inp: torch.Tensor, out: Optional[torch.Tensor], **kw: Any) -> int:
    # inp and out are contiguous; the caller keeps them alive until the handle is released.
    return _frontend.enqueue(kind, name, inp, out, _DTYPE_CODES[inp.dtype], inp.shape, **kw)


def _same_memory(tensor: torch.Tensor, buf: torch.Tensor) -> bool:
    """True when ``buf`` is ``tensor`` itself (it was contiguous), not a copy."""
    return buf.data_ptr() == tensor.data_ptr() and tensor.is_contiguous()


def _from_engine(result: tuple, dtype: torch.dtype) -> torch.Tensor:
    """The engine-allocated output as a tensor (zero-copy)."""
    data, shape, _ = result
    if data is None or data.size == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(data).view(dtype).reshape(shape)


def _split_rows(rows: int) -> int:
    """Rows of a reducescatter result on this rank: lower ranks get the extra ones."""
    n = size()
    return rows // n + (1 if rank() < rows % n else 0)


# ---------------------------------------------------------------- handles
class _Pending:
    __slots__ = ("ids", "keep", "finish")

    def __init__(self, ids: List[int], keep: tuple, finish: Callable[[list], Any]):
        self.ids = ids  # engine handles
        self.keep = keep  # tensors the engine reads or writes, alive until released
        self.finish = finish  # engine results -> what synchronize() returns


_pending: dict = {}
_pending_lock = threading.Lock()
_handle_counter = itertools.count(1)


def _register(ids: List[int], keep: tuple, finish: Callable[[list], Any]) -> int:
    handle = next(_handle_counter)
    with _pending_lock:
        _pending[handle] = _Pending(ids, keep, finish)
    return handle


def _submit_all(submits: List[Callable[[], int]]) -> List[int]:
    """Enqueues a group; on a local error, waits for what was already sent."""
    ids: List[int] = []
    try:
        for submit in submits:
            ids.append(submit())
    except BaseException:
        for i in ids:
            try:
                _frontend.wait(i)
            except RingError:
                pass
        raise
    return ids


def poll(handle: int) -> bool:
    """True when the operation behind ``handle`` has finished, so that
    ``synchronize(handle)`` returns without blocking."""
    with _pending_lock:
        p = _pending.get(handle)
    if p is None:
        raise BadArgumentError(f"unknown handle {handle!r} (already synchronized?)")
    return all(_frontend.poll(i) for i in p.ids)


def synchronize(handle: int) -> Any:
    """Waits for an asynchronous operation and returns its result.

    Returns the output tensor (the input tensor itself, filled, for in-place
    operations), a list of tensors for grouped operations, and
    ``(output, received_splits)`` for alltoall. Raises the operation's error
    (``MismatchError``, ``PeerFailureError``, ...). As in Horovod, a handle
    that is unknown or already synchronized gives None.
    """
    with _pending_lock:
        p = _pending.pop(handle, None)
    if p is None:
        return None
    results, error = [], None
    for i in p.ids:  # every engine handle is released, even after an error
        try:
            results.append(_frontend.wait(i))
        except RingError as e:
            error = error or e
    if error is not None:
        raise error
    return p.finish(results)


# ---------------------------------------------------------------- allreduce
def _allreduce_group(tensors: Sequence[Any], label: str, name: Optional[str], op: int,
                     prescale_factor: float, postscale_factor: float,
                     process_set: ProcessSet, inplace: bool, grouped: bool) -> int:
    op = _check_op(op)
    _check_process_set(process_set)
    bufs = [_contiguous(_checked(t)) for t in tensors]
    base = _frontend.auto_name(label, name)
    outs = bufs if inplace else [torch.empty_like(b) for b in bufs]
    names = [f"{base}.{i}" for i in range(len(bufs))] if grouped else [base]
    ids = _submit_all([
        (lambda b=b, o=o, nm=nm: _enqueue(_frontend.ALLREDUCE, nm, b, o, op=op,
                                          prescale=prescale_factor, postscale=postscale_factor))
        for b, o, nm in zip(bufs, outs, names)
    ])

    copies = [(t, b) for t, b in zip(tensors, bufs) if inplace and not _same_memory(t, b)]

    def finish(_results: list) -> Any:
        if copies:
            with torch.no_grad():
                for t, b in copies:
                    t.copy_(b)
        if inplace:
            res = list(tensors)
        else:
            res = outs
        return res if grouped else res[0]

    return _register(ids, (tuple(tensors), tuple(bufs), tuple(outs)), finish)


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
        process_set: only ``global_process_set`` for now.

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
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


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
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# ---------------------------------------------------------------- allgather
def _allgather_group(tensors: Sequence[Any], label: str, name: Optional[str], process_set: ProcessSet,
                     grouped: bool) -> int:
    _check_process_set(process_set)
    bufs = []
    for t in tensors:
        b = _contiguous(_checked(t))
        bufs.append(b.reshape(1) if b.dim() == 0 else b)
    base = _frontend.auto_name(label, name)
    names = [f"{base}.{i}" for i in range(len(bufs))] if grouped else [base]
    ids = _submit_all([
        (lambda b=b, nm=nm: _enqueue(_frontend.ALLGATHER, nm, b, None)) for b, nm in zip(bufs, names)
    ])
    dtypes = [b.dtype for b in bufs]

    def finish(results: list) -> Any:
        outs = [_from_engine(r, d) for r, d in zip(results, dtypes)]
        return outs if grouped else outs[0]

    return _register(ids, tuple(bufs), finish)


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
    _check_process_set(process_set)
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        raise BadArgumentError(f"root_rank should be an int. Got: {root_rank!r}")
    buf = _contiguous(_checked(tensor))
    name = _frontend.auto_name("broadcast", name)
    out = buf if inplace else torch.empty_like(buf)
    hid = _enqueue(_frontend.BROADCAST, name, buf, out, root=root_rank)

    def finish(_results: list) -> torch.Tensor:
        if not inplace:
            return out
        if not _same_memory(tensor, buf):
            with torch.no_grad():
                tensor.copy_(buf)
        return tensor

    return _register([hid], (tensor, buf, out), finish)


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
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---------------------------------------------------------------- alltoall
def _splits_list(splits: Any) -> List[int]:
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.detach().cpu().reshape(-1).tolist()]
    try:
        return [int(s) for s in splits]
    except (TypeError, ValueError):
        raise BadArgumentError(f"splits should be a sequence of ints. Got: {splits!r}") from None


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts an alltoall: rows ``splits[r]`` of ``tensor`` (consecutive blocks
    along dimension 0) go to rank r; the rows received from every rank are
    concatenated in rank order. Without ``splits`` dimension 0 is split evenly.

    ``synchronize`` returns ``(output, received_splits)``, received_splits an
    int32 tensor (the dtype of ``splits`` when that is a tensor).
    """
    _check_process_set(process_set)
    buf = _contiguous(_checked(tensor))
    if buf.dim() == 0:
        raise BadArgumentError("alltoall needs a tensor with at least one dimension. Got a 0-d tensor")
    n = size()
    if splits is None:
        if buf.shape[0] % n:
            raise BadArgumentError(
                f"alltoall without splits needs a first dimension divisible by size() ({n}). Got: {buf.shape[0]}"
            )
        split_list = [buf.shape[0] // n] * n
    else:
        split_list = _splits_list(splits)
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    name = _frontend.auto_name("alltoall", name)
    hid = _enqueue(_frontend.ALLTOALL, name, buf, None, splits=split_list)

    def finish(results: list) -> tuple:
        return _from_engine(results[0], buf.dtype), torch.tensor(results[0][2], dtype=splits_dtype)

    return _register([hid], (buf,), finish)


# ---------------------------------------------------------------- reducescatter
def _reducescatter_group(tensors: Sequence[Any], label: str, name: Optional[str], op: int,
                         process_set: ProcessSet, prescale_factor: float, postscale_factor: float,
                         grouped: bool) -> int:
    op = _check_op(op)
    _check_process_set(process_set)
    bufs = [_contiguous(_checked(t)) for t in tensors]
    for b in bufs:
        if b.dim() == 0:
            raise BadArgumentError("reducescatter needs a tensor with at least one dimension. Got a 0-d tensor")
    base = _frontend.auto_name(label, name)
    outs = [torch.empty((_split_rows(b.shape[0]),) + tuple(b.shape[1:]), dtype=b.dtype) for b in bufs]
    names = [f"{base}.{i}" for i in range(len(bufs))] if grouped else [base]
    ids = _submit_all([
        (lambda b=b, o=o, nm=nm: _enqueue(_frontend.REDUCESCATTER, nm, b, o, op=op,
                                          prescale=prescale_factor, postscale=postscale_factor))
        for b, o, nm in zip(bufs, outs, names)
    ])
    return _register(ids, (tuple(bufs), tuple(outs)), lambda _r: outs if grouped else outs[0])


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
                           process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a sparse COO tensor by gathering every rank's indices
    and values; ``synchronize`` returns the (uncoalesced) sparse sum, divided
    by ``size()`` for Average. Used by DistributedOptimizer for sparse gradients."""
    op = _check_op(op)
    if op not in (Sum, Average):
        raise BadArgumentError(f"sparse allreduce supports op=Sum or op=Average. Got: {op!r}")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    idx = allgather_async(t._indices().transpose(0, 1).contiguous(), name=f"{name}.indices", process_set=process_set)
    val = allgather_async(t._values(), name=f"{name}.values", process_set=process_set)
    with _pending_lock:
        parts = [_pending.pop(idx), _pending.pop(val)]

    def finish(results: list) -> torch.Tensor:
        indices = parts[0].finish(results[:1])
        values = parts[1].finish(results[1:])
        if op == Average:
            values = values / size()
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(), check_invariants=False)

    return _register(parts[0].ids + parts[1].ids, (t, parts[0].keep, parts[1].keep), finish)


# ---------------------------------------------------------------- join, barrier
def join(device: int = -1) -> int:
    """Declares that this rank has run out of data, as Horovod's ``join``.

    Until every rank has joined, this rank takes part in the allreduces the
    others still submit (DistributedOptimizer's gradients included) by adding
    zeros; ``Average`` still divides by ``size()``. Other collectives raise
    ``BadArgumentError`` while a rank has joined. Returns the rank that joined
    last. ``device`` is accepted for compatibility and ignored.
    """
    from ring_strategy import ops as _core_ops

    return _core_ops.join()


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank has called ``barrier()``."""
    _check_process_set(process_set)
    token = torch.zeros(1, dtype=torch.uint8)
    hid = _enqueue(_frontend.BARRIER, _frontend.auto_name("barrier", None), token, None)
    synchronize(_register([hid], (token,), lambda _r: None))


# The differentiable forms, importable from here as from Horovod's mpi_ops.
from ring_strategy.torch.autograd import (  # noqa: E402
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async", "poll", "synchronize", "join", "barrier",
    "handle_average_backwards_compatibility",
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built",
]
