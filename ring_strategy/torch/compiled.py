"""The front end's collectives while ``torch.compile`` traces them: each is
a call of one of the custom operators (``torch.ops.ring.*``, defined in
:mod:`.custom_ops`) with the front end's arguments in the operator's types.

:mod:`.autograd` and :mod:`._async_ops` call these functions instead of the
eager path when ``torch.compiler.is_compiling()``; Dynamo traces them, so they
hold nothing but plain Python around one operator call. The in-place forms
reduce into a new tensor and copy it into theirs (torch.compile supports
mutating a graph's inputs). Waiting forms only: the ``_async`` functions and
``synchronize`` still break the graph.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
from torch import Tensor

from ring_strategy.process_sets import ProcessSet, place_of

_ring = torch.ops.ring  # the operators, registered when ring_strategy.torch is imported
tracing = torch.compiler.is_compiling  # True while Dynamo traces the caller: then use these functions


def set_id(process_set: ProcessSet) -> int:
    """The engine id that stands for ``process_set`` in an operator's
    arguments; the operators' fakes check it. A set without an id (never
    registered, usable when it holds every rank) goes through the eager rule,
    which Dynamo traces (plain Python on the world's cached place)."""
    ps_id = getattr(process_set, "process_set_id", None)
    return place_of(process_set).id if ps_id is None else ps_id


def allreduce(tensor: Tensor, name: Optional[str], op: int, prescale: float, postscale: float,
              process_set: ProcessSet) -> Tensor:
    """``torch.ops.ring.allreduce``: differentiable, as the eager allreduce."""
    return _ring.allreduce(tensor, name, op, float(prescale), float(postscale), set_id(process_set))


def grouped_allreduce(tensors: Sequence[Tensor], name: Optional[str], op: int, prescale: float, postscale: float,
                      process_set: ProcessSet) -> List[Tensor]:
    """``torch.ops.ring.grouped_allreduce``: differentiable, as the eager one."""
    return _ring.grouped_allreduce(list(tensors), name, op, float(prescale), float(postscale), set_id(process_set))


def allreduce_each(tensors: Sequence[Tensor], names: Sequence[str], op: int, prescale: float, postscale: float,
                   process_set: ProcessSet) -> List[Tensor]:
    """``torch.ops.ring.allreduce_each``: tensor ``i`` reduced under ``names[i]``."""
    return _ring.allreduce_each(list(tensors), list(names), op, float(prescale), float(postscale), set_id(process_set))


def allgather(tensor: Tensor, name: Optional[str], process_set: ProcessSet) -> Tensor:
    """``torch.ops.ring.allgather``; differentiable."""
    return _ring.allgather(tensor, name, set_id(process_set))


def broadcast(tensor: Tensor, root_rank: int, name: Optional[str], process_set: ProcessSet) -> Tensor:
    """``torch.ops.ring.broadcast``; differentiable."""
    return _ring.broadcast(tensor, root_rank, name, set_id(process_set))


def alltoall(tensor: Tensor, splits: Any, name: Optional[str], process_set: ProcessSet) -> Any:
    """``torch.ops.ring.alltoall``: the output, or ``(output, received_splits)``
    when ``splits`` is given, as the eager alltoall returns them."""
    if splits is not None and not isinstance(splits, Tensor):
        splits = torch.tensor(list(splits), dtype=torch.int32)
    output, received = _ring.alltoall(tensor, splits, name, set_id(process_set))
    return output if splits is None else (output, received)


def reducescatter(tensor: Tensor, name: Optional[str], op: int, process_set: ProcessSet, prescale: float,
                  postscale: float) -> Tensor:
    """``torch.ops.ring.reducescatter``; differentiable."""
    return _ring.reducescatter(tensor, name, op, set_id(process_set), float(prescale), float(postscale))


# ---------------------------------------------------------------- in-place forms
def allreduce_(tensor: Tensor, name: Optional[str], op: int, prescale: float, postscale: float,
               process_set: ProcessSet) -> Tensor:
    """``tensor`` overwritten with its reduction, and returned (not differentiable)."""
    with torch.no_grad():
        return tensor.copy_(allreduce(tensor, name, op, prescale, postscale, process_set))


def grouped_allreduce_(tensors: Sequence[Tensor], name: Optional[str], op: int, prescale: float, postscale: float,
                       process_set: ProcessSet) -> List[Tensor]:
    """Each tensor overwritten with its reduction; returns them (not differentiable)."""
    with torch.no_grad():
        reduced = grouped_allreduce(tensors, name, op, prescale, postscale, process_set)
        return [t.copy_(r) for t, r in zip(tensors, reduced)]


def broadcast_(tensor: Tensor, root_rank: int, name: Optional[str], process_set: ProcessSet) -> Tensor:
    """``tensor`` overwritten with ``root_rank``'s, and returned (not differentiable)."""
    with torch.no_grad():
        return tensor.copy_(broadcast(tensor, root_rank, name, process_set))
