"""Layer 1 of the core (:mod:`ring_strategy._core`): argument rules every
front end (numpy, torch, TensorFlow, Keras) applies the same way, written once: reduction ops and Horovod's ``average=`` flag,
root ranks, alltoall splits and the rows of a reducescatter. Front ends
convert their tensors to the plain Python values these functions take
(shapes, ints, lists) and call them; nothing here imports a framework.

Imports nothing of ring_strategy but the extension's constants and the
exceptions: no state, no engine calls. Process sets are checked by
:func:`ring_strategy._core.registry.place_of`, and operations named by
:func:`ring_strategy._core.handles.auto_names`.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, List, Optional, Tuple

import numpy as np

from ring_strategy import _native
from ring_strategy.exceptions import BadArgumentError

Sum: int = _native.REDUCE_OPS["Sum"]
Average: int = _native.REDUCE_OPS["Average"]
Min: int = _native.REDUCE_OPS["Min"]
Max: int = _native.REDUCE_OPS["Max"]
Product: int = _native.REDUCE_OPS["Product"]
# Adaptive summation (docs/adasum.md): allreduce of floating-point tensors
# on a power-of-two number of ranks; the engine checks both at enqueue.
Adasum: int = _native.REDUCE_OPS["Adasum"]

# The engine's reduction codes: what check_op() returns.
ENGINE_OPS = frozenset(_native.REDUCE_OPS.values())
ADASUM_SPARSE_ERROR = (
    "The Adasum reduction does not support sparse tensors. As a workaround please pass "
    "sparse_as_dense=True to DistributedOptimizer"
)


def check_op(op: Any) -> int:
    """``op`` as the engine's reduction code.

    Raises:
        BadArgumentError: for anything that is not Sum, Average, Min, Max,
            Product or Adasum.
    """
    if op.__class__ is int and op in ENGINE_OPS:  # the common case, first
        return op
    try:
        known = not isinstance(op, bool) and bool(op in ENGINE_OPS)
    except (TypeError, ValueError):  # unhashable, or no truth value (an array)
        known = False
    if not known:
        raise BadArgumentError(f"op should be one of Sum, Average, Min, Max, Product, Adasum. Got: {op!r}")
    return int(op)


def check_sparse_op(op: int) -> None:
    """NotImplementedError for ``op=Adasum`` on a sparse tensor (torch sparse
    COO, TensorFlow IndexedSlices): the adaptive sum is defined on whole
    dense tensors."""
    if op == Adasum:
        raise NotImplementedError(ADASUM_SPARSE_ERROR)


def predivide_scales(op: int, predivide: float) -> Tuple[float, float]:
    """``(prescale, postscale)`` of a gradient reduction with ``op`` and
    Horovod's ``gradient_predivide_factor``: with Average, each rank's
    gradient times ``1 / predivide`` is summed, then times ``predivide`` and
    divided by the set's size by the engine when the reduction runs (so a
    traced step follows an elastic world's size). Otherwise ``(1, 1)``."""
    if op == Average:
        return 1.0 / predivide, predivide
    return 1.0, 1.0


def handle_average_backwards_compatibility(op: Optional[int], average: Optional[bool]) -> int:
    """Resolves Horovod's deprecated ``average=`` flag against ``op``.

    Returns ``op`` when given; otherwise Average, or Sum for ``average=False``
    (with a DeprecationWarning pointing at the caller's caller: the user's
    call of a front-end function). Giving both is a BadArgumentError (a
    ValueError).
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


def check_root(root: Any) -> int:
    """``root`` as an int when it is a whole number that fits the engine
    (a Python or numpy integer, not a bool), else BadArgumentError. Whether
    it names a rank of the job is checked by the engine, on every rank."""
    if root.__class__ is int and -(2**31) <= root < 2**31:
        return root
    if isinstance(root, bool) or not isinstance(root, numbers.Integral) or not -(2**31) <= int(root) < 2**31:
        raise BadArgumentError(f"root_rank should be the integer rank of a process in the job. Got: {root!r}")
    return int(root)


def require_rows(op_label: str, ndim: int, noun: str = "tensor") -> None:
    """BadArgumentError unless the input has a first dimension (alltoall and
    reducescatter split it into blocks of rows)."""
    if ndim == 0:
        raise BadArgumentError(f"{op_label} needs a {noun} with at least one dimension. Got a 0-d {noun}")


def alltoall_splits(splits: Any, rows: int, size: int) -> List[int]:
    """The rows an alltoall sends to each rank.

    Args:
        splits: None for an even split of ``rows``, else the rows for each
            rank as a sequence or array of integers (a framework tensor
            converted with ``.tolist()`` or ``numpy()`` by its front end).
        rows: the input's first dimension.
        size: the number of ranks.

    Raises:
        BadArgumentError: ``splits`` is None and ``rows`` does not divide by
            ``size``, or ``splits`` is not made of integers. Their count and
            sum are checked by the engine.
    """
    if splits is None:
        if rows % size:
            raise BadArgumentError(
                f"alltoall without splits needs a first dimension divisible by size() ({size}). Got: {rows}"
            )
        return [rows // size] * size
    try:
        return [int(s) for s in np.asarray(splits).reshape(-1).tolist()]
    except (TypeError, ValueError):
        raise BadArgumentError(f"splits should be a sequence of ints. Got: {splits!r}") from None


def reducescatter_rows(rows: int, size: int, rank: int) -> int:
    """Rows of a reducescatter result on ``rank``: ``rows`` split as evenly as
    possible, the lower ranks getting one extra row when it does not divide.
    The engine's own rule (native/collectives/slices.h), so front ends size
    their outputs exactly as the engine fills them."""
    return _native.reducescatter_rows(rows, size, rank)
