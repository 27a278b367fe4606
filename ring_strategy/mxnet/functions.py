"""Keeping replicas identical: broadcast of parameters and of Python
objects, and allgather of Python objects, as in Horovod's MXNet API.

Typical start of a Gluon script::

    net.initialize(ctx=mx.cpu())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
"""

from __future__ import annotations

import types
from typing import Any, List, Optional

import mxnet as mx

from ring_strategy import _objects
from ring_strategy.mxnet.mpi_ops import broadcast_, global_process_set

__all__ = ["allgather_object", "broadcast_object", "broadcast_parameters"]


def _broadcast_into(param: mx.gluon.Parameter, root_rank: int, name: str) -> None:
    """``root_rank``'s value of ``param`` written into every copy of it (one per context)."""
    copies = param.list_data()
    broadcast_(copies[0], root_rank, name=name)
    for other in copies[1:]:
        other[:] = copies[0]


def _broadcast_after_init(param: mx.gluon.Parameter, root_rank: int, name: str) -> None:
    """Makes ``param``, whose initialization is deferred until its shape is
    known (the first forward pass), broadcast itself once initialized."""
    initialize = param._init_impl

    def init_then_broadcast(self: mx.gluon.Parameter, *args: Any, **kwargs: Any) -> None:
        initialize(*args, **kwargs)
        _broadcast_into(self, root_rank, name)

    param._init_impl = types.MethodType(init_then_broadcast, param)


def broadcast_parameters(params: Any, root_rank: int = 0, prefix: Optional[str] = None) -> None:
    """Overwrites ``params`` in place with those of ``root_rank``.

    A Gluon parameter whose initialization is still deferred (its shape is
    known only after the first forward pass) is broadcast as soon as it is
    initialized, so every rank must run that first forward pass.

    Args:
        params: ``block.collect_params()`` (a ParameterDict) or a dict of
            name -> Parameter or NDArray (``Module.get_params()``), with the
            same names on every rank.
        root_rank: the rank whose values everyone takes.
        prefix: prepended to the names of the broadcasts; several calls in
            flight at once need different prefixes.

    Raises:
        ValueError: ``params`` is not a dict or ParameterDict, or ``prefix``
            is not a string.
    """
    if not isinstance(params, (dict, mx.gluon.ParameterDict)):
        raise ValueError(f"invalid params of type: {type(params).__name__}")
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(f"prefix should be a string. Got: {prefix!r}")
    # A prefix of its own, so that no gradient reduction named after the same
    # parameter can meet these broadcasts in flight.
    label = f"broadcast_parameters.{prefix or ''}"
    for key, value in sorted(params.items(), key=lambda kv: str(kv[0])):
        name = f"{label}{key}"
        if not isinstance(value, mx.gluon.Parameter):
            broadcast_(value, root_rank, name=name)
        elif value._data is None and value._deferred_init:
            _broadcast_after_init(value, root_rank, name)
        else:
            _broadcast_into(value, root_rank, name)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Any = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (pickled, then broadcast).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the rank whose object everyone receives.
        name: names the two broadcasts; the same on every rank.
        process_set: the ranks that take part.
    """
    return _objects.broadcast_object(obj, root_rank, name or "broadcast_object", process_set)


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order.

    Args:
        obj: any picklable object (may differ in type and size between ranks).
        name: names the two allgathers; the same on every rank.
        process_set: the ranks that take part.
    """
    return _objects.allgather_object(obj, name or "allgather_object", process_set)
