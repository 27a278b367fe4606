"""Many tensors allreduced in one step of the framework. Where the
framework has native ring operations (TensorFlow's op library, JAX's FFI
handlers, ring_strategy.torch), the tensors themselves go to the engine as
one group and its fusion buffer packs them (:meth:`Flattener.native_group`).
Otherwise they are flattened into one buffer per dtype inside the
framework's step (graph, jit or eager), the buffers reduced by the engine in
one host call, the results split back into tensors of the original shapes.
TensorFlow's ``DistributedGradientTape`` and Keras' ``DistributedOptimizer``
reduce their gradients this way.

A front end says how its tensors are flattened, split and handed to the host
by subclassing :class:`Flattener`; nothing here imports a framework.
:func:`reduce_except_local` is the rule for gradients that stay on their
rank (local variables and layers), shared by TensorFlow and Keras.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ring_strategy._core.arrays import allreduce_group
from ring_strategy._core.registry import ProcessSet, global_process_set, place_of


class Flattener:
    """How one framework's tensors become flat buffers and back."""

    @staticmethod
    def dtype_name(tensor: Any) -> str:
        """The tensor's dtype as numpy names it ("float32", "bfloat16")."""
        raise NotImplementedError

    @staticmethod
    def flatten(tensors: List[Any]) -> Any:
        """The tensors (of one dtype) raveled and concatenated into one 1-D tensor."""
        raise NotImplementedError

    @staticmethod
    def split(flat: Any, likes: List[Any]) -> List[Any]:
        """``flat`` cut into pieces shaped like ``likes`` (the inverse of :meth:`flatten`)."""
        raise NotImplementedError

    @staticmethod
    def host_call(fn: Any, flats: List[Any]) -> List[Any]:
        """``fn`` (numpy arrays in and out, same shapes and dtypes) run on the host."""
        raise NotImplementedError

    @staticmethod
    def native_group(tensors: List[Any], names: List[str], op: int, prescale: float, postscale: float,
                     process_set: ProcessSet) -> Optional[List[Any]]:
        """The tensors reduced as they are, ``tensors[i]`` under ``names[i]``,
        by the framework's native operations; None (the default) when it has
        none: then they are flattened."""
        return None


def by_dtype(dtype_names: Sequence[str]) -> Dict[str, List[int]]:
    """Positions grouped by dtype name, in order of first appearance (the
    same on every rank when the tensors are)."""
    groups: Dict[str, List[int]] = {}
    for i, d in enumerate(dtype_names):
        groups.setdefault(d, []).append(i)
    return groups


def fused_allreduce(flattener: type, tensors: Sequence[Any], name: str, op: int,
                    prescale: float = 1.0, postscale: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> List[Any]:
    """Every tensor reduced over the ranks of ``process_set``, in one
    operation of the framework's step.

    Args:
        flattener: the framework's :class:`Flattener` subclass.
        tensors: dense tensors, the same shapes and dtypes in the same order
            on every rank.
        name: engine name prefix: tensor i is ``"<name>.<i>"`` when reduced
            natively, the flattened buffer of dtype D ``"<name>.<D>"``.
        op: the engine's reduction op.
        prescale, postscale: multiply the input before and the result after
            the reduction.

    Returns:
        The reduced tensors, in the order given.
    """
    tensors = list(tensors)
    whole = flattener.native_group(tensors, [f"{name}.{i}" for i in range(len(tensors))], op, prescale, postscale,
                                   process_set)
    if whole is not None:
        return list(whole)
    groups = by_dtype([flattener.dtype_name(t) for t in tensors])
    flats = [flattener.flatten([tensors[k] for k in idx]) for idx in groups.values()]
    names = [f"{name}.{d}" for d in groups]

    def reduce_on_host(arrays: List[np.ndarray]) -> List[np.ndarray]:
        return allreduce_group(arrays, names, op, prescale, postscale, process_set)

    reduced = flattener.host_call(reduce_on_host, flats)
    out: List[Any] = [None] * len(tensors)
    for idx, flat in zip(groups.values(), reduced):
        for k, piece in zip(idx, flattener.split(flat, [tensors[k] for k in idx])):
            out[k] = piece
    return out


def reduce_except_local(grads: Sequence[Any], local: Sequence[bool], reduce: Callable[[List[Any]], List[Any]],
                        scale_local: bool, divide: Callable[[Any, int], Any],
                        process_set: ProcessSet = global_process_set) -> List[Any]:
    """Gradients with those marked ``local`` kept on their rank (Horovod's
    local variables and layers): the others go through ``reduce``, the local
    ones are divided by the process set's size when ``scale_local`` (None stays None).

    Args:
        grads: gradients (framework tensors or None), in the same order on every rank.
        local: per gradient, True when it stays local; the same on every rank.
        reduce: reduces a list of gradients over the ranks (the front end's fused allreduce).
        scale_local: divide the local gradients by the set's size.
        divide: the front end's ``divide(gradient, n)`` (sparse gradients included).
        process_set: the ranks that reduce (default: every rank).
    """
    shared = [i for i, mine in enumerate(local) if not mine]
    out = list(grads)
    for i, g in zip(shared, reduce([grads[i] for i in shared])):
        out[i] = g
    n = place_of(process_set).size
    if scale_local and n > 1:
        out = [divide(g, n) if mine and g is not None else g for g, mine in zip(out, local)]
    return out
