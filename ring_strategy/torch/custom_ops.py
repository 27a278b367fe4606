"""The collectives as ``torch.library`` custom operators (``torch.ops.ring.*``),
for code that ``torch.compile`` traces.

Dynamo cannot trace into the engine's calls, so without these a collective
inside a compiled function is a graph break. Each operator here is one opaque
node in the graph: its fake (meta) implementation gives the result's shape,
dtype and device at trace time, and its real implementation, run when the
compiled graph runs, is the eager short path of :mod:`._async_ops` (enqueue,
wait, results), so both paths compute the same numbers.

The front end calls them through :mod:`.compiled`, and only while
``torch.compiler.is_compiling()``; eager calls never pass through the torch
dispatcher.

Names. Ranks match collectives by name, and a compiled graph runs many times.
A name given by the caller is an argument of the node, so every run enqueues
that name; each operator waits for its result before returning, so the name
is free again for the next run. A name left out (None) is generated when the
node *runs*, by the same per-world counter as eager calls ("allreduce.noname.N"):
a graph traced, or recompiled, on one rank only cannot shift the names, and
eager and compiled calls can be mixed as long as every rank makes them in the
same order. Generating names at trace time would bake one rank's trace
history into its graph.

Process sets are passed by their engine id (0: the global set); the fake
implementations check the arguments (op, set membership, dtype, device), so
a bad argument fails at compile time with the eager path's message.

Gradients follow :mod:`.autograd` (Horovod 0.28's conventions), written with
these operators so that the backward graph has no break either.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ring_strategy._core.rules import Average, Sum, check_op, check_root, reducescatter_rows, require_rows
from ring_strategy.basics import rank
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.process_sets import SetPlace, place_of, by_id
from ring_strategy.torch import _async_ops as _ops

# ---------------------------------------------------------------- argument helpers


def _place(process_set: int) -> SetPlace:
    """This rank's place in the registered set with engine id ``process_set``;
    BadArgumentError when there is none or this rank is not a member."""
    return place_of(by_id(process_set))


def _fresh(tensor: Tensor, rows: Any = None) -> Tensor:
    """A new contiguous tensor like ``tensor`` (the layout the engine's
    outputs have), with ``rows`` rows when given."""
    shape = tuple(tensor.shape) if rows is None else (rows, *tensor.shape[1:])
    return tensor.new_empty(shape)


def _check_reduce(tensors: Sequence[Tensor], op: int, process_set: int) -> None:
    """The eager path's checks of a reduction's arguments, at trace time."""
    check_op(op)
    _place(process_set)
    for t in tensors:
        _ops._checked(t)


# ---------------------------------------------------------------- allreduce
@torch.library.custom_op("ring::allreduce", mutates_args=())
def _allreduce(tensor: Tensor, name: Optional[str], op: int, prescale: float, postscale: float,
               process_set: int) -> Tensor:
    """``tensor`` reduced over the set; a new tensor (the input is not modified)."""
    return _ops.allreduce_sync(tensor, name, op, prescale, postscale, by_id(process_set))


@_allreduce.register_fake
def _allreduce_fake(tensor, name, op, prescale, postscale, process_set):
    _check_reduce([tensor], op, process_set)
    return _fresh(tensor)


@torch.library.custom_op("ring::grouped_allreduce", mutates_args=())
def _grouped_allreduce(tensors: List[Tensor], name: Optional[str], op: int, prescale: float, postscale: float,
                       process_set: int) -> List[Tensor]:
    """Each tensor reduced over the set, submitted together ("<name>.<i>")."""
    return _ops.grouped_allreduce_sync(tensors, name, op, prescale, postscale, by_id(process_set))


@_grouped_allreduce.register_fake
def _grouped_allreduce_fake(tensors, name, op, prescale, postscale, process_set):
    _check_reduce(tensors, op, process_set)
    return [_fresh(t) for t in tensors]


@torch.library.custom_op("ring::allreduce_each", mutates_args=(), schema=(
    "(Tensor[] tensors, str[] names, int op, float prescale, float postscale, int process_set) -> Tensor[]"))
def _allreduce_each(tensors: List[Tensor], names: List[str], op: int, prescale: float, postscale: float,
                    process_set: int) -> List[Tensor]:
    """Tensor ``i`` reduced under ``names[i]``: every one is enqueued before
    any is waited for, so the engine may fuse them. Not differentiable."""
    ps = by_id(process_set)
    handles = [_ops.allreduce_async(t, name=n, op=op, prescale_factor=prescale, postscale_factor=postscale,
                                    process_set=ps) for t, n in zip(tensors, names)]
    return [_ops.synchronize(h) for h in handles]


@_allreduce_each.register_fake
def _allreduce_each_fake(tensors, names, op, prescale, postscale, process_set):
    if len(names) != len(tensors):
        raise BadArgumentError(f"allreduce_each: {len(tensors)} tensors but {len(names)} names")
    _check_reduce(tensors, op, process_set)
    return [_fresh(t) for t in tensors]


def _setup_reduce(ctx, inputs, output):
    _, _, op, prescale, postscale, process_set = inputs
    ctx.args = (op, prescale, postscale, process_set)


def _allreduce_backward(ctx, grad):
    return _allreduce(grad, None, *ctx.args), None, None, None, None, None


def _grouped_allreduce_backward(ctx, grads):
    return list(_grouped_allreduce(list(grads), None, *ctx.args)), None, None, None, None, None


torch.library.register_autograd("ring::allreduce", _allreduce_backward, setup_context=_setup_reduce)
torch.library.register_autograd("ring::grouped_allreduce", _grouped_allreduce_backward, setup_context=_setup_reduce)


# ---------------------------------------------------------------- allgather
@torch.library.custom_op("ring::allgather", mutates_args=())
def _allgather(tensor: Tensor, name: Optional[str], process_set: int) -> Tensor:
    """Every rank's ``tensor`` concatenated along dimension 0, in rank order."""
    return _ops.synchronize(_ops.allgather_async(tensor, name, by_id(process_set)))


@_allgather.register_fake
def _allgather_fake(tensor, name, process_set):
    _place(process_set)
    _ops._checked(tensor)
    # The other ranks' rows are known only when the node runs.
    return _fresh(tensor.reshape(1) if tensor.dim() == 0 else tensor, torch.library.get_ctx().new_dynamic_size())


def _setup_allgather(ctx, inputs, output):
    tensor, _, process_set = inputs
    ctx.shape, ctx.process_set = tensor.shape, process_set


def _allgather_backward(ctx, grad):
    """This rank's rows of the averaged incoming gradient."""
    averaged = _allreduce(grad, None, Average, 1.0, 1.0, ctx.process_set)
    rows = ctx.shape[0] if len(ctx.shape) else 1
    place = _place(ctx.process_set)
    # Made from grad, not a constant, which tracing would try to fold.
    counts = _allgather(grad.new_full((1,), rows, dtype=torch.int64), None, ctx.process_set)
    torch._check(counts.shape[0] == place.size)  # one count per rank
    offset = counts[:place.rank].sum()
    index = torch.arange(rows, device=grad.device) + offset  # a gather: the offset stays a tensor
    return averaged.index_select(0, index).reshape(ctx.shape), None, None


torch.library.register_autograd("ring::allgather", _allgather_backward, setup_context=_setup_allgather)


# ---------------------------------------------------------------- broadcast
@torch.library.custom_op("ring::broadcast", mutates_args=())
def _broadcast(tensor: Tensor, root_rank: int, name: Optional[str], process_set: int) -> Tensor:
    """``root_rank``'s ``tensor`` (a global rank); a new tensor."""
    return _ops.synchronize(_ops.broadcast_async(tensor, root_rank, name, by_id(process_set)))


@_broadcast.register_fake
def _broadcast_fake(tensor, root_rank, name, process_set):
    check_root(root_rank)
    _place(process_set)
    _ops._checked(tensor)
    return _fresh(tensor)


def _setup_broadcast(ctx, inputs, output):
    _, ctx.root_rank, _, ctx.process_set = inputs


def _broadcast_backward(ctx, grad):
    """The averaged incoming gradient on the root rank, zeros elsewhere."""
    averaged = _allreduce(grad, None, Average, 1.0, 1.0, ctx.process_set)
    if rank() != ctx.root_rank:
        averaged = torch.zeros_like(averaged)
    return averaged, None, None, None


torch.library.register_autograd("ring::broadcast", _broadcast_backward, setup_context=_setup_broadcast)


# ---------------------------------------------------------------- alltoall
@torch.library.custom_op("ring::alltoall", mutates_args=())
def _alltoall(tensor: Tensor, splits: Optional[Tensor], name: Optional[str],
              process_set: int) -> Tuple[Tensor, Tensor]:
    """``(output, received_splits)`` of an alltoall; ``splits`` None splits
    dimension 0 evenly. received_splits has the dtype of ``splits`` (int32 without)."""
    output, received = _ops.synchronize(_ops.alltoall_async(tensor, splits, name, by_id(process_set)))
    return output, received


@_alltoall.register_fake
def _alltoall_fake(tensor, splits, name, process_set):
    require_rows("alltoall", tensor.dim())
    place = _place(process_set)
    _ops._checked(tensor)
    received = torch.empty(place.size, dtype=torch.int32 if splits is None else splits.dtype)
    return _fresh(tensor, torch.library.get_ctx().new_dynamic_size()), received


def _setup_alltoall(ctx, inputs, output):
    ctx.rows, ctx.process_set = inputs[0].shape[0], inputs[3]
    ctx.received = output[1]
    ctx.mark_non_differentiable(output[1])


def _alltoall_backward(ctx, grad, _received_grad):
    """The incoming gradient sent back over the received splits."""
    back, _ = _alltoall(grad, ctx.received, None, ctx.process_set)
    torch._check(back.shape[0] == ctx.rows)  # the rows this rank sent come back
    return back, None, None, None


torch.library.register_autograd("ring::alltoall", _alltoall_backward, setup_context=_setup_alltoall)


# ---------------------------------------------------------------- reducescatter
@torch.library.custom_op("ring::reducescatter", mutates_args=())
def _reducescatter(tensor: Tensor, name: Optional[str], op: int, process_set: int, prescale: float,
                   postscale: float) -> Tensor:
    """This rank's block of rows of ``tensor`` reduced over the set."""
    return _ops.synchronize(_ops.reducescatter_async(tensor, name, op, by_id(process_set), prescale, postscale))


@_reducescatter.register_fake
def _reducescatter_fake(tensor, name, op, process_set, prescale, postscale):
    require_rows("reducescatter", tensor.dim())
    _check_reduce([tensor], op, process_set)
    place = _place(process_set)
    rows = int(tensor.shape[0])  # the engine's rule needs a number: a symbolic row count is specialised
    return _fresh(tensor, reducescatter_rows(rows, place.size, place.rank))


def reducescatter_grad_scale(op: int, prescale: float, postscale: float, set_size: int) -> float:
    """What multiplies the allgathered gradient of a reducescatter (Horovod's rule)."""
    return (set_size if op == Sum else 1) * prescale * postscale


def _setup_reducescatter(ctx, inputs, output):
    tensor, _, op, process_set, prescale, postscale = inputs
    ctx.rows, ctx.process_set = tensor.shape[0], process_set
    ctx.scale = reducescatter_grad_scale(op, prescale, postscale, _place(process_set).size)


def _reducescatter_backward(ctx, grad):
    """The allgather of the incoming gradients, scaled as in :mod:`.autograd`."""
    gathered = _allgather(grad, None, ctx.process_set)
    torch._check(gathered.shape[0] == ctx.rows)  # every rank's block: the input's rows
    return (gathered * ctx.scale if ctx.scale != 1 else gathered), None, None, None, None, None


torch.library.register_autograd("ring::reducescatter", _reducescatter_backward, setup_context=_setup_reducescatter)
