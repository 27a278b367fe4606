"""Collectives on values, with the signatures of ``horovod.keras`` and
``horovod.tensorflow.keras``: ``allreduce(value, name=None, average=None,
...)``, ``allgather(value, name=None)``, ``broadcast(value, root_rank,
name=None)``, ``reducescatter(value, name=None, op=Average)`` and the object
collectives. A value is anything numpy reads: a numpy array, a Python
number or list, a tensor of the active Keras backend. Results are numpy
arrays, computed by the numpy core on the host (outside the train step; the
optimizer and callbacks reduce inside it themselves).

Example::

    import numpy as np, keras_callbacks as hvd
    hvd.init()
    mean_loss = hvd.allreduce(np.float32(0.25), name="val_loss")
    config = hvd.broadcast_object({"lr": 0.1} if hvd.rank() == 0 else None, root_rank=0)
"""

from __future__ import annotations

from typing import Any, List, Optional, Type

import numpy as np

import keras

from keras_callbacks.compression import Compression, Compressor
from ring_strategy import _objects
from ring_strategy import ops as ring_ops
from ring_strategy._core.rules import handle_average_backwards_compatibility
from ring_strategy.process_sets import ProcessSet, global_process_set

__all__ = ["allreduce", "allgather", "broadcast", "reducescatter", "broadcast_object", "allgather_object"]


def _host(value: Any) -> np.ndarray:
    """``value`` as a numpy array (backend tensors through Keras)."""
    if isinstance(value, np.ndarray):
        return value
    if keras.ops.is_tensor(value):
        return np.asarray(keras.ops.convert_to_numpy(value))
    return np.asarray(value)


def allreduce(value: Any, name: Optional[str] = None, average: Optional[bool] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, op: Optional[int] = None,
              compression: Type[Compressor] = Compression.none, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Reduces ``value`` over all ranks (Average by default).

    Args:
        value: the same shape and dtype on every rank.
        name: the engine's name for it, the same on every rank (generated in
            call order when omitted).
        average: deprecated; use ``op`` (True: Average, False: Sum).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        op: Average (default), Sum, Min, Max, Product or Adasum.
        compression: ``Compression.none``, ``fp16`` or ``bf16``: the precision
            the value travels in.
        out: a numpy array for the result (same shape and dtype; may be
            ``value`` itself), as the numpy core's ``out=``.

    Returns:
        The reduced numpy array, identical on every rank.

    Raises:
        BadArgumentError: for both ``op`` and ``average``, or an unknown op.
    """
    op = handle_average_backwards_compatibility(op, average)
    array = _host(value)
    if compression is Compression.none:
        return ring_ops.allreduce(array, op=op, name=name, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, out=out)
    wire, ctx = compression.compress(array)
    reduced = ring_ops.allreduce(_host(wire), op=op, name=name, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)
    result = _host(compression.decompress(reduced, ctx))
    if out is None:
        return result
    out[...] = result
    return out


def allgather(value: Any, name: Optional[str] = None) -> np.ndarray:
    """Concatenates every rank's ``value`` along the first dimension, in rank
    order (the first dimension may differ between ranks; a scalar counts as
    one row)."""
    return ring_ops.allgather(_host(value), name=name)


def broadcast(value: Any, root_rank: int, name: Optional[str] = None) -> np.ndarray:
    """Returns ``root_rank``'s ``value`` on every rank (same shape and dtype everywhere)."""
    return ring_ops.broadcast(_host(value), root_rank, name=name)


def reducescatter(value: Any, name: Optional[str] = None, op: int = ring_ops.Average) -> np.ndarray:
    """Reduces ``value`` over all ranks and returns this rank's block of rows
    (lower ranks get one extra row when the rows do not divide evenly).

    Args:
        value: at least one dimension; the same shape and dtype on every rank.
        name: the engine's name for it, the same on every rank.
        op: Average (default), Sum, Min, Max or Product.
    """
    return ring_ops.reducescatter(_host(value), op=op, name=name)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (pickled).

    Args:
        obj: any picklable object; ignored on the other ranks.
        root_rank: the rank whose object everyone receives.
        name: names the two broadcasts; the same on every rank.
        process_set: the ranks taking part (default: every rank).
    """
    return _objects.broadcast_object(obj, root_rank, name or "keras.broadcast_object", process_set)


def allgather_object(obj: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> List[Any]:
    """Returns the list of every rank's ``obj`` (pickled), in rank order.

    Args:
        obj: any picklable object; may differ in type and size between ranks.
        name: names the two allgathers; the same on every rank.
        process_set: the ranks taking part (default: every rank).
    """
    return _objects.allgather_object(obj, name or "keras.allgather_object", process_set)
