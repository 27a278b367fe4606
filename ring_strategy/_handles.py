"""The handle layer every front end shares, and the rest of a world's
front-end state.

An operation in flight is an :class:`Operation`: the engine handles it
waits for, the buffers the engine reads and writes until then, and how the
engine's results become what ``synchronize`` returns. The numpy core hands
its users the object itself (:class:`ring_strategy.ops.Handle` is a
subclass); torch hands out Horovod's integer handles, its number, and keeps
the operation in the table of this module (:func:`register`, :func:`take`).

Every operation belongs to the world (one ``init()`` to its ``shutdown()``)
it was submitted in. The engine's handle ids restart in every world, so an
operation of an ended world must never reach the engine again: polling or
synchronizing it raises ``ShutdownError`` naming its handle.
:func:`start_world`, which ``init()`` calls, drops the ended world's
bookkeeping (its tabled and abandoned operations and their buffers) and
restarts the counters of automatic names ("allreduce.noname.0" first
again), so that ranks that re-initialize agree on names whatever they did
before. Handle numbers never restart: a number names one operation of one
world.

The dict and list operations used on this state are atomic under the GIL,
so front ends may submit and synchronize from several threads.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ring_strategy import _frontend
from ring_strategy.basics import _runtime, _state
from ring_strategy.exceptions import BadArgumentError, RingError, ShutdownError

# Engine results (one per engine handle, in order) -> what synchronize() returns.
Finish = Callable[[List[tuple]], Any]

_numbers = itertools.count(1)
_live: Dict[int, "Operation"] = {}  # integer handles: number -> operation not yet synchronized
_ended: Dict[int, int] = {}  # number -> world, for integer handles left behind by ended worlds
_abandoned: List["_Dropped"] = []  # operations dropped before being synchronized
_sweep_lock = threading.Lock()
_names: Dict[Tuple[str, int], Iterator[int]] = {}  # (label, process set) -> counter


class Operation:
    """One front-end operation in flight (one or more engine operations).

    Args:
        ids: engine handle ids, valid in the current world only.
        keep: the buffers the engine reads or writes, referenced until the
            operation is synchronized (or, when it is dropped first, until
            the engine is done with them).
        finish: turns the engine results into what synchronize() returns.
    """

    __slots__ = ("number", "ids", "keep", "finish", "world", "done")

    def __init__(self, ids: List[int], keep: Any, finish: Finish):
        if _abandoned:  # operations dropped earlier are released as new ones start
            _sweep()
        self.number = next(_numbers)  # unique in the process, across worlds
        self.ids = ids
        self.keep = keep
        self.finish = finish
        self.world = _state.generation
        self.done = False  # synchronized (or given up)

    def __repr__(self) -> str:
        return f"handle {self.number}"


class _Dropped:
    """What an abandoned operation leaves for the sweep."""

    __slots__ = ("world", "ids", "keep")

    def __init__(self, op: Operation):
        self.world, self.ids, self.keep = op.world, op.ids, op.keep


# ---------------------------------------------------------------- names
def auto_name(label: str, name: Optional[str], process_set: int = 0) -> str:
    """``name`` checked, or the next generated name for ``label`` in the
    process set with engine id ``process_set`` ("allreduce.noname.3").

    Generated names follow call order within a world and a process set, so
    the ranks of a set, calling in the same order, agree on them."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise BadArgumentError(f"name should be a non-empty string. Got: {name!r}")
        return name
    key = (label, process_set)
    counter = _names.get(key)
    if counter is None:
        counter = _names.setdefault(key, itertools.count())
    return f"{label}.noname.{next(counter)}"


# ---------------------------------------------------------------- worlds
def start_world() -> None:
    """Forgets the ended worlds' operations and restarts automatic names.
    Called by ``init()`` when a new world starts."""
    with _sweep_lock:
        for op in list(_live.values()):
            _ended[op.number] = op.world
            op.keep = None  # the old engine is gone: nothing uses the buffers
        _live.clear()
        _abandoned.clear()
        _names.clear()


def _ended_error(number: int, world: int) -> ShutdownError:
    return ShutdownError(
        f"handle {number} belongs to a ring world that ended with shutdown() (world {world}; this is world "
        f"{_state.generation}): its operation was cancelled; submit it again"
    )


# ---------------------------------------------------------------- integer handles
def register(ids: List[int], keep: Any, finish: Finish) -> int:
    """An :class:`Operation` kept in this module's table; returns its number
    (the integer handle)."""
    op = Operation(ids, keep, finish)
    _live[op.number] = op
    return op.number


def find(number: Any) -> Optional[Operation]:
    """The operation behind a handle number; None when the number is unknown
    (never issued, or already synchronized). ShutdownError for an operation
    of an ended world."""
    if not isinstance(number, int):
        return None
    op = _live.get(number)
    if op is None:
        world = _ended.get(number)
        if world is not None:
            raise _ended_error(number, world)
        return None
    if op.world != _state.generation:
        raise _ended_error(number, op.world)
    return op


def take(number: Any) -> Optional[Operation]:
    """:func:`find`, removing the operation from the table (its caller now
    owns it: it synchronizes it or makes it part of another)."""
    op = find(number)
    return None if op is None or _live.pop(op.number, None) is None else op


# ---------------------------------------------------------------- waiting
def poll(op: Operation) -> bool:
    """True when every engine operation of ``op`` has finished."""
    if op.world != _state.generation:
        raise _ended_error(op.number, op.world)
    if op.done:
        raise BadArgumentError(f"unknown {op!r} (already synchronized?)")
    return all(_frontend.poll(i) for i in op.ids)


def synchronize(op: Operation) -> Any:
    """Waits for ``op`` and returns its result, or raises the first error of
    its engine operations. Every engine handle is released, even after an
    error.

    Python's signal handlers run while it waits; when one raises (Ctrl-C's
    KeyboardInterrupt, a SIGALRM timeout), that exception comes out and
    ``op`` is left in flight, as it was: it can be synchronized again (its
    integer handle stays valid), or the job ended with ``shutdown()``."""
    if op.world != _state.generation:
        raise _ended_error(op.number, op.world)
    if op.done:
        raise BadArgumentError(f"unknown {op!r} (already synchronized?)")
    try:
        results = _wait(op.ids, op.finish)  # a signal's exception leaves every handle unreleased
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


def _wait(ids: List[int], finish: Finish) -> Any:
    return _frontend.wait_all(ids, getattr(finish, "needs_results", True))


def finish_now(ids: List[int], keep: Any, finish: Finish) -> Any:
    """synchronize() of an operation the calling thread has just queued and
    waits for right away (a synchronous call): no :class:`Operation` is made
    unless a signal handler's exception interrupts the wait, which abandons
    it (its buffers stay alive until the engine is done with them)."""
    if _abandoned:  # as a new Operation would: release what was dropped
        _sweep()
    try:
        results = _wait(ids, finish)
    except RingError:  # the operation's own error: every handle is released
        raise
    except BaseException:
        abandon(Operation(ids, keep, finish))
        raise
    return finish(results)


def _no_results(_: Any) -> None:
    return None


def wait_now(handle_id: int, keep: Any) -> None:
    """finish_now() of one engine handle whose caller gave its output
    buffer (nothing to build from the results): the synchronous calls'
    short path, one native call when nothing goes wrong."""
    if _abandoned:
        _sweep()
    try:
        _runtime().wait_release(handle_id, False)
    except RingError:
        raise
    except BaseException:
        abandon(Operation([handle_id], keep, _no_results))
        raise


def _retire(op: Operation) -> None:
    """Forgets ``op``, whose engine handles are released."""
    op.done = True
    _live.pop(op.number, None)
    op.keep = None


# ---------------------------------------------------------------- abandoned operations
def abandon(op: Operation) -> None:
    """Marks ``op`` as dropped by its owner before being synchronized: its
    buffers are released once the engine is done with them."""
    if not op.done:
        op.done = True
        _abandoned.append(_Dropped(op))


def _sweep() -> None:
    """Releases the abandoned operations the engine has finished (and those
    of ended worlds), with their buffers."""
    if not _sweep_lock.acquire(blocking=False):
        return  # another thread is sweeping
    try:
        for dropped in list(_abandoned):
            if dropped.world == _state.generation:
                try:
                    if not all(_frontend.poll(i) for i in dropped.ids):
                        continue
                except RingError:
                    pass  # the job ended: nothing of it is in use any more
                for i in dropped.ids:
                    try:
                        _frontend.release(i)
                    except RingError:
                        pass  # its error: nobody is left to receive it
            _abandoned.remove(dropped)  # by identity: _Dropped has no __eq__
    finally:
        _sweep_lock.release()
