"""The engine as every front end (numpy, torch, TensorFlow, Keras) sees it:
operation kinds, dtype and reduction codes, and the calls that queue an
operation and wait for it by engine handle id. Arrays go in through DLPack,
so any contiguous array works: numpy, torch, TensorFlow, JAX, in host
memory or on a CUDA GPU (the engine finds the device from the array).

Engine handle ids are only meaningful in the world (``init()`` to
``shutdown()``) that issued them; front ends hold them through the handle
layer (:mod:`ring_strategy._handles`), which keeps them in their world.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ring_strategy import _native
from ring_strategy._rules import check_op, check_root
from ring_strategy.basics import _runtime

ALLREDUCE = _native.OP_ALLREDUCE
ALLGATHER = _native.OP_ALLGATHER
BROADCAST = _native.OP_BROADCAST
ALLTOALL = _native.OP_ALLTOALL
REDUCESCATTER = _native.OP_REDUCESCATTER
BARRIER = _native.OP_BARRIER
JOIN = _native.OP_JOIN

DTYPES = dict(_native.DTYPES)  # name -> code, e.g. "bfloat16" -> 6
REDUCE_OPS = dict(_native.REDUCE_OPS)  # "Sum" -> 0, ...


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
    process_set: int = 0,
    stream: int = 0,
) -> int:
    """Queues one operation; returns its handle id. `input` and `output`
    (None: the engine allocates) must stay alive until the handle is released.

    ``wake=False`` when the caller waits for the handle right away: the
    waiting thread then makes the progress itself, without waking the
    engine's background thread (lower latency for synchronous calls).
    ``process_set`` is the engine id of a set this rank is in (0: every
    rank; see :func:`ring_strategy.process_sets._check_process_set`).
    Arrays on a CUDA GPU go to the engine's GPU path: ``stream`` is the
    CUstream (an integer; 0: the legacy default stream) their producer ran
    on, which the engine waits for before reading them."""
    return _runtime().enqueue(
        kind, name, input, output, dtype_code, check_op(op), check_root(root), float(prescale), float(postscale),
        shape if shape.__class__ is tuple else [int(d) for d in shape],
        splits if splits == () else [int(s) for s in splits], wake, "", process_set, stream,
    )


def enqueue_reduce(kind: int, name: str, input: Any, output: Any, dtype_code: int, op: Any, prescale: Any,
                   postscale: Any, process_set: int = 0, wake: bool = False) -> int:
    """:func:`enqueue` of a reduction of host memory shaped as ``input``,
    with no splits: the front ends' short path (one engine call with few
    arguments); ``wake=False`` for a caller that waits for it at once."""
    return _runtime().enqueue_reduce(kind, name, input, output, dtype_code, check_op(op), float(prescale),
                                     float(postscale), process_set, wake)


def enqueue_group(
    kind: int,
    names: Sequence[str],
    inputs: List[Any],
    outputs: Optional[List[Any]],
    dtype_codes: Sequence[int],
    *,
    op: int = 0,
    root: int = 0,
    prescale: float = 1.0,
    postscale: float = 1.0,
    wake: bool = True,
    process_set: int = 0,
    streams: Sequence[int] = (),
) -> List[int]:
    """Queues one operation per name in one engine call; returns their
    handle ids, in order. ``inputs[i]`` (a list), ``outputs[i]`` (a list,
    entries None where the engine allocates; None for all) and
    ``dtype_codes[i]`` describe member ``i``, whose shape is its input's;
    the other arguments, as for :func:`enqueue`, are shared by the group
    (``streams``: one per member, or empty for 0). Dtypes may differ.

    Every member is checked before any is queued: a bad one raises its
    error (``BadArgumentError`` naming its tensor) and nothing is queued.
    The buffers must stay alive until the handles are released."""
    return _runtime().enqueue_group(
        kind, names, inputs, outputs, dtype_codes, None, check_op(op), check_root(root), float(prescale),
        float(postscale), wake, process_set, streams,
    )


def wait_all(handle_ids: Sequence[int], results: bool = True) -> Optional[List[Tuple[Optional[Any], list, list]]]:
    """:func:`wait` for every handle: their results in order (None with
    ``results=False``, for a caller that gave every output buffer). When some
    failed, the first one's error is raised once every handle is released.
    When a signal handler raises meanwhile, its exception comes out and no
    handle is released (each can be waited for again)."""
    if len(handle_ids) == 1:
        result = _runtime().wait_release(handle_ids[0], results)
        return [result] if results else None
    return _runtime().wait_release_group(handle_ids, results)


def release(handle_id: int) -> Tuple[Optional[Any], list, list]:
    """Forgets a finished handle; returns its result or raises its error."""
    return _runtime().release(handle_id)


def poll(handle_id: int) -> bool:
    return _runtime().poll(handle_id)


def wait(handle_id: int) -> Tuple[Optional[Any], list, list]:
    """Blocks (GIL released) until done; returns (engine-allocated output as a
    flat uint8 numpy array or None, output shape, received splits) or raises
    the operation's error. Python's signal handlers run meanwhile (at least
    every 100 ms); when one raises, its exception comes out and the handle
    is neither finished nor released (it can be waited for again)."""
    return _runtime().wait_release(handle_id)
