"""Variables and Python objects across ranks: broadcast_variables,
broadcast_, broadcast_global_variables, broadcast_object,
broadcast_object_fn, allgather_object."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ring_strategy import _objects
from ring_strategy import ops as _np
from ring_strategy._core.handles import group_names
from ring_strategy._core.rules import check_root
from ring_strategy.tensorflow.mpi_ops import (
    ProcessSet,
    place_of,
    _do_not_convert,
    _op_name,
    global_process_set,
    host_call,
)


@_do_not_convert
def broadcast_variables(variables: Sequence[tf.Variable], root_rank: int,
                        process_set: ProcessSet = global_process_set, inplace: bool = False) -> Optional[tf.Operation]:
    """Assigns ``root_rank``'s value to every variable, on every rank.

    All variables travel in one host call (the engine fuses them). Call it
    after the variables are created, e.g. after the first training step, so
    that optimizer slots are included.

    Args:
        variables: tf.Variables, in the same order on every rank.
        root_rank: the rank whose values everyone receives.
        process_set: the ranks taking part (default: every rank).
        inplace: accepted for Horovod compatibility.

    Returns:
        In a graph, the op grouping the assignments; eagerly, None.
    """
    assigns = _assign_broadcast(variables, root_rank, None, process_set, "broadcast_variables")
    return None if tf.executing_eagerly() or not assigns else tf.group(*assigns)


def broadcast_(variables: Sequence[tf.Variable], root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> List[Any]:
    """In-place broadcast: assigns ``root_rank``'s value to every variable, on
    every rank, in one host call, and returns the updated variables (their
    assignments' results in a graph).

    Args:
        variables: tf.Variables, in the same order on every rank.
        root_rank: the rank whose values everyone receives.
        name: names the engine's tensors (``"<name>.<i>"``), the same on every rank.
        process_set: the ranks taking part (default: every rank).
    """
    return _assign_broadcast(variables, root_rank, name, process_set, "broadcast_")


def _assign_broadcast(variables: Sequence[tf.Variable], root_rank: int, name: Optional[str], process_set: ProcessSet,
                      label: str) -> List[Any]:
    """The assignments of ``root_rank``'s values to ``variables`` (one host call)."""
    place = place_of(process_set)
    root_rank = check_root(root_rank)
    variables = list(variables)
    if not variables:
        return []
    names = group_names(_op_name(label, name, place.id), len(variables), True)

    def bcast(arrays: List[np.ndarray]) -> List[np.ndarray]:
        handles = [_np.broadcast_async(a, root_rank, name=nm, process_set=process_set) for a, nm in zip(arrays, names)]
        return [_np.synchronize(h).reshape(a.shape) for h, a in zip(handles, arrays)]

    values = host_call(bcast, [tf.convert_to_tensor(v) for v in variables], [v.dtype for v in variables],
                       [v.shape for v in variables], "RingBroadcastVariables")
    return [v.assign(x) for v, x in zip(variables, values)]


def broadcast_global_variables(root_rank: int) -> tf.Operation:
    """The op assigning ``root_rank``'s value to every global variable of the
    default graph (``tf.compat.v1.global_variables()``), for graph-mode
    (TensorFlow 1-style) scripts: run it in the session once the variables
    are initialized, or use :class:`BroadcastGlobalVariablesHook`.

    Raises:
        RuntimeError: in eager mode; use ``broadcast_variables`` there.
    """
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    op = broadcast_variables(tf.compat.v1.global_variables(), root_rank)
    return tf.no_op() if op is None else op


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (pickled; eager only).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the rank whose object everyone receives.
        session: accepted for Horovod compatibility (TF1 sessions are not supported).
        name: names the two broadcasts; the same on every rank.
        process_set: the ranks taking part (default: every rank).
    """
    return _objects.broadcast_object(obj, root_rank, name or "tf.broadcast_object", process_set)


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                        process_set: ProcessSet = global_process_set) -> Callable[[Any], Any]:
    """A function ``f(obj)`` returning ``root_rank``'s ``obj`` on every rank:
    :func:`broadcast_object` with these arguments fixed."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj: Any, session: Any = None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order (eager only)."""
    return _objects.allgather_object(obj, name or "tf.allgather_object", process_set)
