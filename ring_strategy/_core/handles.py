"""Layer 4 of the core: operations in flight and the handles front ends give out.

An operation in flight is an :class:`Operation`: the engine handle ids it
waits for, the buffers the engine reads and writes until then, and how the
engine's results become what ``synchronize`` returns. The numpy API hands
out the object itself (:class:`ring_strategy._core.arrays.Handle`, a subclass);
torch hands out Horovod's integer handles, the operation's number, and keeps
the operation in the world's table (:func:`register`, :func:`take`).

Contracts:

- No engine calls of its own: waiting, polling and releasing go through
  :mod:`ring_strategy._core.engine`.
- Every operation belongs to the world it was submitted in (its
  generation). The engine's handle ids restart in every world, so an
  operation of an ended world never reaches the engine again: polling or
  synchronizing it raises ``ShutdownError`` naming its handle. Handle
  numbers never restart: a number names one operation of one world.
- Automatic names ("allreduce.noname.0") follow call order within a world
  and a process set, so ranks that call in the same order agree on them,
  whatever they did in earlier worlds.
"""

from __future__ import annotations

import functools
import itertools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ring_strategy._core import engine, world
from ring_strategy.exceptions import BadArgumentError, RingError, ShutdownError

# Engine results (one per engine handle, in order) -> what synchronize() returns.
Finish = Callable[[List[tuple]], Any]

_numbers = itertools.count(1)
_ended: Dict[int, int] = {}  # number -> generation, for integer handles left behind by ended worlds
_ended_lock = threading.Lock()


class Operation:
    """One front-end operation in flight (one or more engine operations).

    Args:
        ids: engine handle ids, valid in the current world only.
        keep: the buffers the engine reads or writes, referenced until the
            operation is synchronized (or, when it is dropped first, until
            the engine is done with them).
        finish: turns the engine results into what synchronize() returns.
    """

    __slots__ = ("number", "ids", "keep", "finish", "generation", "done")

    def __init__(self, ids: List[int], keep: Any, finish: Finish):
        self.number = next(_numbers)  # unique in the process, across worlds
        self.ids = ids
        self.keep = keep
        self.finish = finish
        self.generation = world.now.generation
        self.done = False  # synchronized (or given up)

    def __repr__(self) -> str:
        return f"handle {self.number}"


# ---------------------------------------------------------------- names
def auto_name(label: str, name: Optional[str], process_set: int = 0) -> str:
    """``name`` checked, or the next generated name for ``label`` in the
    process set with engine id ``process_set`` ("allreduce.noname.3")."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise BadArgumentError(f"name should be a non-empty string. Got: {name!r}")
        return name
    names = world.now.names
    key = (label, process_set)
    counter = names.get(key)
    if counter is None:
        counter = names.setdefault(key, itertools.count())
    return f"{label}.noname.{next(counter)}"


@functools.lru_cache(maxsize=256)
def group_names(base: str, count: int, grouped: bool) -> Tuple[str, ...]:
    """Engine names of a group's tensors: ``"<base>.<i>"``; a single
    operation's tensor is ``base`` itself. Cached: a training loop's groups
    (fixed names) get theirs without formatting them again."""
    return tuple(f"{base}.{i}" for i in range(count)) if grouped else (base,)


def auto_names(label: str, name: Optional[str], process_set: int, count: int, grouped: bool) -> Tuple[str, ...]:
    """The engine names of an operation on ``count`` tensors:
    :func:`group_names` of :func:`auto_name`'s name (one call for a front
    end's whole naming step)."""
    return group_names(auto_name(label, name, process_set), count, grouped)


# ---------------------------------------------------------------- worlds
def leave_behind(ended: world.World) -> None:
    """Records the integer handles an ended world leaves unsynchronized, so
    that they raise ShutdownError, and lets go of their buffers (the old
    engine is gone). Called by ``init()`` once a new world has begun."""
    with _ended_lock:
        for op in list(ended.live.values()):
            _ended[op.number] = op.generation
            op.keep = None
        ended.live.clear()
        ended.dropped.clear()


def _ended_error(number: int, generation: int) -> ShutdownError:
    return ShutdownError(
        f"handle {number} belongs to a ring world that ended with shutdown() (world {generation}; this is world "
        f"{world.now.generation}): its operation was cancelled; submit it again"
    )


def _check_current(op: Operation) -> None:
    if op.generation != world.now.generation:
        raise _ended_error(op.number, op.generation)
    if op.done:
        raise BadArgumentError(f"unknown {op!r} (already synchronized?)")


# ---------------------------------------------------------------- integer handles
def register(ids: List[int], keep: Any, finish: Finish) -> int:
    """An :class:`Operation` kept in the world's table; returns its number
    (the integer handle)."""
    op = Operation(ids, keep, finish)
    world.now.live[op.number] = op
    return op.number


def find(number: Any) -> Optional[Operation]:
    """The operation behind a handle number; None when the number is unknown
    (never issued, or already synchronized). ShutdownError for an operation
    of an ended world."""
    if not isinstance(number, int):
        return None
    op = world.now.live.get(number)
    if op is None:
        generation = _ended.get(number)
        if generation is not None:
            raise _ended_error(number, generation)
        return None
    if op.generation != world.now.generation:
        raise _ended_error(number, op.generation)
    return op


def take(number: Any) -> Optional[Operation]:
    """:func:`find`, removing the operation from the table (its caller now
    owns it: it synchronizes it or makes it part of another)."""
    op = find(number)
    return None if op is None or world.now.live.pop(op.number, None) is None else op


# ---------------------------------------------------------------- waiting
def poll(op: Operation) -> bool:
    """True when every engine operation of ``op`` has finished."""
    _check_current(op)
    return all(engine.poll(i) for i in op.ids)


def synchronize(op: Operation) -> Any:
    """Waits for ``op`` and returns its result, or raises the first error of
    its engine operations. Every engine handle is released, even after an
    error.

    When a signal handler raises while it waits (Ctrl-C's
    KeyboardInterrupt, a SIGALRM timeout), that exception comes out and
    ``op`` is left in flight, as it was: it can be synchronized again (its
    integer handle stays valid), or the job ended with ``shutdown()``."""
    _check_current(op)
    try:
        results = engine.wait_all(op.ids, getattr(op.finish, "needs_results", True))
    except RingError:  # an operation's own error: every handle is released
        _retire(op)
        raise
    try:
        return op.finish(results)
    finally:
        _retire(op)


def outputs_given(finish: Finish) -> Finish:
    """Marks ``finish`` as one that never reads the engine's results (the
    caller gave every output buffer), so waiting skips building them."""
    finish.needs_results = False  # type: ignore[attr-defined]
    return finish


def _retire(op: Operation) -> None:
    """Forgets ``op``, whose engine handles are released."""
    op.done = True
    world.now.live.pop(op.number, None)
    op.keep = None


def abandon(op: Operation) -> None:
    """Marks ``op`` as dropped by its owner before being synchronized: its
    buffers are released once the engine is done with them (at once when
    its world has ended)."""
    if not op.done:
        op.done = True
        if op.generation == world.now.generation:
            engine.drop(op.ids, op.keep)
        op.keep = None
