"""The small internal interface every front end (numpy, torch, TensorFlow,
Keras) uses to talk to the engine. Arrays go in through DLPack, so any
contiguous CPU array works: numpy, torch, TensorFlow, JAX.
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, Optional, Sequence, Tuple

from ring_strategy import _native
from ring_strategy.basics import _runtime
from ring_strategy.exceptions import BadArgumentError

ALLREDUCE = _native.OP_ALLREDUCE
ALLGATHER = _native.OP_ALLGATHER
BROADCAST = _native.OP_BROADCAST
ALLTOALL = _native.OP_ALLTOALL
REDUCESCATTER = _native.OP_REDUCESCATTER
BARRIER = _native.OP_BARRIER
JOIN = _native.OP_JOIN

DTYPES = dict(_native.DTYPES)  # name -> code, e.g. "bfloat16" -> 6
REDUCE_OPS = dict(_native.REDUCE_OPS)  # "Sum" -> 0, ...

_counters: dict = {}


def auto_name(label: str, name: Optional[str]) -> str:
    """`name` checked, or the next generated name for `label` ("allreduce.noname.3").

    Generated names follow call order, so ranks that call in the same order
    agree on them."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise BadArgumentError(f"name should be a non-empty string. Got: {name!r}")
        return name
    counter = _counters.setdefault(label, itertools.count())
    return f"{label}.noname.{next(counter)}"


_VALID_OPS = frozenset(REDUCE_OPS.values())


def check_op(op: Any) -> int:
    if op.__class__ is int and op in _VALID_OPS:  # the common case, first
        return op
    if op not in _VALID_OPS or isinstance(op, bool):
        raise BadArgumentError(f"op should be one of Sum, Average, Min, Max, Product. Got: {op!r}")
    return int(op)


def check_root(root: Any) -> int:
    """``root`` as an int if it is a whole number that fits the engine, else BadArgumentError."""
    if root.__class__ is int and -(2**31) <= root < 2**31:
        return root
    if isinstance(root, bool) or not isinstance(root, numbers.Integral) or not -(2**31) <= int(root) < 2**31:
        raise BadArgumentError(f"root_rank should be the integer rank of a process in the job. Got: {root!r}")
    return int(root)


def enqueue(
    kind: int,
    name: str,
    input: Any,
    output: Any,
    dtype_code: int,
    shape: Sequence[int],
    *,
    op: int = 0,
    root: int = 0,
    prescale: float = 1.0,
    postscale: float = 1.0,
    splits: Sequence[int] = (),
    wake: bool = True,
) -> int:
    """Queues one operation; returns its handle id. `input` and `output`
    (None: the engine allocates) must stay alive until the handle is released.

    ``wake=False`` when the caller waits for the handle right away: the
    waiting thread then makes the progress itself, without waking the
    engine's background thread (lower latency for synchronous calls)."""
    return _runtime().enqueue(
        kind, name, input, output, dtype_code, check_op(op), check_root(root), float(prescale), float(postscale),
        shape if shape.__class__ is tuple else [int(d) for d in shape],
        splits if splits == () else [int(s) for s in splits], wake,
    )


def release(handle_id: int) -> Tuple[Optional[Any], list, list]:
    """Forgets a finished handle; returns its result or raises its error."""
    return _runtime().release(handle_id)


def poll(handle_id: int) -> bool:
    return _runtime().poll(handle_id)


def wait(handle_id: int) -> Tuple[Optional[Any], list, list]:
    """Blocks (GIL released) until done; returns (engine-allocated output as a
    flat uint8 numpy array or None, output shape, received splits) or raises
    the operation's error."""
    return _runtime().wait_release(handle_id)
