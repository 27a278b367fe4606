"""Variables and Python objects across ranks: broadcast_variables,
broadcast_object, allgather_object."""

from __future__ import annotations

import pickle
from typing import Any, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ring_strategy import ops as _np
from ring_strategy.basics import rank
from ring_strategy.tensorflow.mpi_ops import (
    _do_not_convert,
    ProcessSet,
    _check_process_set,
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
        process_set: only the global set is supported.
        inplace: accepted for Horovod compatibility.

    Returns:
        In a graph, the op grouping the assignments; eagerly, None.
    """
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return None
    name = _op_name("broadcast_variables", None)

    def bcast(arrays: List[np.ndarray]) -> List[np.ndarray]:
        handles = [_np.broadcast_async(a, root_rank, name=f"{name}.{i}") for i, a in enumerate(arrays)]
        return [_np.synchronize(h).reshape(a.shape) for h, a in zip(handles, arrays)]

    values = host_call(bcast, [tf.convert_to_tensor(v) for v in variables], [v.dtype for v in variables],
                       [v.shape for v in variables], "RingBroadcastVariables")
    assigns = [v.assign(x) for v, x in zip(variables, values)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (pickled; eager only).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the rank whose object everyone receives.
        session: accepted for Horovod compatibility (TF1 sessions are not supported).
        name: names the two broadcasts; the same on every rank.
        process_set: only the global set is supported.
    """
    _check_process_set(process_set)
    name = name or "tf.broadcast_object"
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload, length = None, np.zeros(1, dtype=np.int64)
    length = _np.broadcast(length, root_rank, name=f"{name}.sz")
    if payload is None:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    payload = _np.broadcast(payload, root_rank, name=f"{name}.t")
    return obj if rank() == root_rank else pickle.loads(payload.tobytes())


def allgather_object(obj: Any, session: Any = None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order (eager only)."""
    _check_process_set(process_set)
    name = name or "tf.allgather_object"
    payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    sizes = _np.allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.sz")
    data = _np.allgather(payload, name=f"{name}.t")
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
