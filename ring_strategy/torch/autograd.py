"""The differentiable collectives: autograd functions over the async core.

Gradients follow Horovod 0.28, including its scaling conventions, so that a
Horovod script computes the same numbers here:

- allreduce: the gradient is the allreduce of the incoming gradient with the
  same op and scale factors (exact for Sum and Average).
- allgather: this rank's rows of the *averaged* incoming gradients.
- broadcast: the *averaged* incoming gradients on the root rank, zeros elsewhere.
- alltoall: the incoming gradient sent back with an alltoall over the
  received splits.
- reducescatter: the allgather of the incoming gradients, multiplied by
  ``size()`` for Sum, and by the scale factors.

Every rank must run the backward pass (each gradient is a collective), in the
same order.

While ``torch.compile`` traces a call (``torch.compiler.is_compiling()``), the
collectives go through the custom operators of :mod:`.custom_ops` instead
(:mod:`.compiled`),
with the same results and gradients, so the compiled graph has no break.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch

from ring_strategy._core.rules import Average, handle_average_backwards_compatibility
from ring_strategy.basics import rank
from ring_strategy.process_sets import ProcessSet, place_of, global_process_set
from ring_strategy.torch import _async_ops as _ops
from ring_strategy.torch import compiled, custom_ops
from ring_strategy.torch.compiled import tracing
from ring_strategy.torch._async_ops import synchronize
from ring_strategy.torch.compression import Compression


def _differentiable(tensors: Sequence[Any]) -> bool:
    """Whether autograd records an operation on ``tensors``: otherwise the
    collectives skip its Function, whose bookkeeping costs microseconds a
    call (the results are the same)."""
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)


def _process_set_rank(process_set: ProcessSet) -> int:
    """This rank's index in the set (the order of allgather's blocks)."""
    return place_of(process_set).rank


# ---------------------------------------------------------------- allreduce
class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return _ops.allreduce_sync(tensor, name, op, prescale, postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        return (allreduce(grad, op=op, prescale_factor=prescale, postscale_factor=postscale,
                          process_set=process_set), None, None, None, None, None)


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: Any = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` element-wise over all ranks; the input is not modified.

    Differentiable: when ``tensor`` requires grad, the result does too.

    Args:
        tensor: a CPU tensor of the same shape and dtype on every rank.
        average: deprecated; use ``op``.
        name: unique name while in flight (generated in call order when omitted).
        compression: ``Compression.none`` (default), ``Compression.fp16`` or
            ``Compression.bf16``: floating tensors travel in 16 bits.
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
        process_set: the ranks taking part (default: every rank).

    Returns:
        A new tensor of the same shape and dtype, identical on every rank.

    Example::

        total = hvd.allreduce(torch.ones(3), op=hvd.Sum)  # tensor([n, n, n])
    """
    op = handle_average_backwards_compatibility(op, average)
    compressed, cctx = compression.compress(tensor)
    if tracing():
        reduced = compiled.allreduce(compressed, name, op, prescale_factor, postscale_factor, process_set)
    elif _differentiable([compressed]):
        reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        reduced = _ops.allreduce_sync(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, cctx)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(_ops.grouped_allreduce_sync(tensors, name, op, prescale, postscale, process_set))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        reduced = grouped_allreduce(list(grads), op=op, prescale_factor=prescale, postscale_factor=postscale,
                                    process_set=process_set)
        return (None, None, None, None, None, *reduced)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None, name: Optional[str] = None,
                      compression: Any = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """:func:`allreduce` of each tensor in a list, submitted together; returns the list."""
    op = handle_average_backwards_compatibility(op, average)
    if not tensors:
        return []
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors])
    if tracing():
        reduced = compiled.grouped_allreduce(compressed, name, op, prescale_factor, postscale_factor, process_set)
    elif _differentiable(compressed):
        reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, *compressed)
    else:
        reduced = _ops.grouped_allreduce_sync(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]


# ---------------------------------------------------------------- allgather
def _my_rows_of(grad: torch.Tensor, rows: int, process_set: ProcessSet) -> torch.Tensor:
    """This rank's block of an allgather result, from every rank's row count."""
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    offset = int(counts[:_process_set_rank(process_set)].sum())
    return grad.narrow(0, offset, rows)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out = synchronize(_ops.allgather_async(tensor, name, process_set))  # checks tensor first
        ctx.shape, ctx.process_set = tensor.shape, process_set
        return out

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce(grad, op=Average, process_set=ctx.process_set)
        rows = ctx.shape[0] if len(ctx.shape) else 1
        return _my_rows_of(averaged, rows, ctx.process_set).reshape(ctx.shape), None, None


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along dimension 0, in rank order.

    The first dimension may differ between ranks; the other dimensions and
    the dtype must agree. Differentiable (see the module docstring).

    Returns:
        A new tensor whose first dimension is the sum of every rank's.
    """
    if tracing():
        return compiled.allgather(tensor, name, process_set)
    return _Allgather.apply(tensor, name, process_set)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        outs = synchronize(_ops.grouped_allgather_async(list(tensors), name, process_set))  # checks tensors first
        ctx.shapes, ctx.process_set = [t.shape for t in tensors], process_set
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        averaged = grouped_allreduce(list(grads), op=Average, process_set=ctx.process_set)
        rows = [s[0] if len(s) else 1 for s in ctx.shapes]
        counts = allgather(torch.tensor(rows, dtype=torch.int64).reshape(1, -1), process_set=ctx.process_set)
        offsets = counts[:_process_set_rank(ctx.process_set)].sum(dim=0)
        return (None, None, *[g.narrow(0, int(o), r).reshape(s)
                              for g, o, r, s in zip(averaged, offsets, rows, ctx.shapes)])


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """:func:`allgather` of each tensor in a list; returns the list."""
    if not tensors:
        return []
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# ---------------------------------------------------------------- broadcast
class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(_ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        averaged = allreduce(grad, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:  # root_rank is a global rank
            averaged = torch.zeros_like(averaged)
        return averaged, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank; the input is not modified.

    Shape and dtype must agree on every rank. Differentiable (see the module
    docstring).
    """
    if tracing():
        return compiled.broadcast(tensor, root_rank, name, process_set)
    return _Broadcast.apply(tensor, root_rank, name, process_set)


# ---------------------------------------------------------------- alltoall
class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(_ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, *_unused):
        back, _ = synchronize(_ops.alltoall_async(grad, ctx.received, None, ctx.process_set))
        return back, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """Sends rows ``splits[r]`` of ``tensor`` (consecutive blocks along
    dimension 0) to rank r and concatenates what every rank sent here.

    Args:
        tensor: a CPU tensor; dimensions after the first must agree on every rank.
        splits: rows for each rank (list, tuple or tensor, summing to the
            first dimension); when omitted dimension 0 is split evenly.
        name: unique name while in flight.
        process_set: the ranks taking part (default: every rank).

    Returns:
        The received tensor; when ``splits`` is given, the pair
        ``(output, received_splits)`` as in Horovod. Differentiable in ``tensor``.
    """
    if tracing():
        return compiled.alltoall(tensor, splits, name, process_set)
    return _Alltoall.apply(tensor, splits, name, process_set)


# ---------------------------------------------------------------- reducescatter
def _reducescatter_grad_scale(op: int, prescale: float, postscale: float, process_set: ProcessSet) -> float:
    return custom_ops.reducescatter_grad_scale(op, prescale, postscale, place_of(process_set).size)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, prescale, postscale, process_set)
        return synchronize(_ops.reducescatter_async(tensor, name, op, process_set, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        gathered = allgather(grad, process_set=ctx.process_set)
        return (gathered * ctx.scale if ctx.scale != 1 else gathered), None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression: Any = Compression.none,
                  op: int = Average, process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` over all ranks and returns this rank's block of rows.

    Dimension 0 is split as evenly as possible; lower ranks get one extra row
    when it does not divide by ``size()``. Differentiable (see the module
    docstring).

    Args:
        tensor: a CPU tensor with at least one dimension, the same shape and
            dtype on every rank.
        name: unique name while in flight.
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        op: Average (default), Sum, Min, Max or Product.
        process_set: the ranks taking part (default: every rank).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after it.
    """
    compressed, cctx = compression.compress(tensor)
    if tracing():
        reduced = compiled.reducescatter(compressed, name, op, process_set, prescale_factor, postscale_factor)
    else:
        reduced = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(reduced, cctx)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.process_set = process_set
        ctx.scale = _reducescatter_grad_scale(op, prescale, postscale, process_set)
        return tuple(synchronize(_ops.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        gathered = grouped_allgather(list(grads), process_set=ctx.process_set)
        return (None, None, None, None, None, *[g * ctx.scale if ctx.scale != 1 else g for g in gathered])


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression: Any = Compression.none, op: int = Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """:func:`reducescatter` of each tensor in a list, submitted together; returns the list."""
    if not tensors:
        return []
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]
