"""Layer 3 of the core: the one door to the engine.

Every call into the engine's runtime (``ring_strategy._native.Runtime``)
from Python goes through this module: starting and ending it, submitting
operations, waiting for them, polling and releasing their handles, process
sets, the timeline. Nothing above it calls ``_native``'s runtime.

Contracts:

- :func:`submit` is the one submission function. It owns the engine's
  argument list and the sync/async choice: ``sync=True`` waits here, the
  calling thread making the engine's progress itself (no wake-up of the
  background thread: lower latency), and returns the results;
  ``sync=False`` returns the engine handle ids at once.
- Arrays go in as they are, through DLPack (numpy, torch, TensorFlow, JAX,
  cupy; host or CUDA memory), or as ``(address, nbytes, shape)`` host
  memory. The caller keeps them alive until the handles are released.
- Engine handle ids are valid in the world that issued them only; the
  handle layer (:mod:`ring_strategy._core.handles`) keeps them in it.
- :func:`submit` checks the reduction op, once per submission, for every
  front end: an engine code (``rules.ENGINE_OPS``, what front ends pass)
  goes through as it is; anything else is converted or refused by
  ``rules.check_op`` before anything is queued. The ``enqueue*`` functions
  below it take an engine code.
- :func:`wait_all` is the one verb for waiting. Python's signal handlers run
  while it waits; when one raises, its exception comes out and no handle is
  released. An interrupted synchronous :func:`submit` hands its handles to
  :func:`drop`, so its buffers stay alive until the engine is done.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ring_strategy import _native
from ring_strategy._core import world
from ring_strategy._core.rules import ENGINE_OPS, check_op, check_root
from ring_strategy.exceptions import RingError, ShutdownError

if TYPE_CHECKING:
    from ring_strategy.environments import ClusterEnvironment

ALLREDUCE = _native.OP_ALLREDUCE
ALLGATHER = _native.OP_ALLGATHER
BROADCAST = _native.OP_BROADCAST
ALLTOALL = _native.OP_ALLTOALL
REDUCESCATTER = _native.OP_REDUCESCATTER
BARRIER = _native.OP_BARRIER
JOIN = _native.OP_JOIN

DTYPES = dict(_native.DTYPES)  # name -> code, e.g. "bfloat16" -> 6
REDUCE_OPS = dict(_native.REDUCE_OPS)  # "Sum" -> 0, ...

# (engine-allocated output as flat uint8 numpy array or None, output shape, received splits)
Result = Tuple[Optional[Any], list, list]
_HOST = (np.ndarray, tuple)  # inputs the engine reads as host memory with their own shape
_sweep_lock = threading.Lock()
_runtime = world.runtime  # the running world's engine, for tests that drive it directly


def _rt() -> "_native.Runtime":
    """The running world's engine (read as data); ShutdownError when none runs."""
    rt = world.now.runtime
    if rt is None:
        raise ShutdownError(world.NOT_INITIALIZED)
    return rt


# ---------------------------------------------------------------- the runtime's life
def open_runtime(env: "ClusterEnvironment",
                 meet: Callable[[str, Callable[[List[str]], None]], None]) -> "_native.Runtime":
    """A started runtime for this process's place in the job. ``meet``
    gets its endpoint and a function that connects it to every rank's
    endpoints (in rank order); it returns once every rank has connected."""
    rt = _native.Runtime(
        rank=env.rank, size=env.size, local_rank=env.local_rank, local_size=env.local_size,
        cross_rank=env.cross_rank, cross_size=env.cross_size, secret=env.secret or b"", job_id=env.job_id,
        host_id=env.host_id, bind_host=env.bind_host, advertise_host=env.advertise_host,
    )
    meet(rt.local_endpoint(), rt.connect)
    rt.start()
    return rt


def close_runtime(rt: "_native.Runtime") -> None:
    """Shuts an ended world's engine down (peers see this rank leave)."""
    rt.shutdown()


def setting(key: str) -> Any:
    """The running engine's configuration value ``key`` (``RING_*`` parsed once)."""
    return _rt().config[key]


# ---------------------------------------------------------------- operations
def submit(kind: int, name: Any, input: Any, output: Any, dtype: Any, *, op: Any = 0, root: Any = 0,
           prescale: float = 1.0, postscale: float = 1.0, splits: Sequence[int] = (), process_set: int = 0,
           stream: Any = 0, shape: Optional[Sequence[int]] = None, sync: bool = False, keep: Any = None,
           results: bool = True) -> Any:
    """Queues engine operations: one when ``name`` is a string, on ``input``
    (``output`` None: the engine allocates) with dtype code ``dtype``; a
    group when ``name`` is a list or tuple of names, ``input``, ``output``
    (or None for all), ``dtype`` and ``stream`` (or empty) then holding one
    entry per member, each shaped as its input. The other arguments are
    shared. A bad member raises its error and nothing is queued.

    Args:
        splits: an alltoall's rows per rank (one operation only).
        process_set: the engine id of a set this rank is in (0: every rank).
        stream: the CUstream the input's producer ran on (0: none, or the
            legacy default stream); the engine waits for it before reading.
        shape: one operation's shape, when not its input's.
        sync: wait here (see the module's contracts).
        keep: what must stay alive if a synchronous wait is interrupted.
        results: with ``sync``, build the results (False: the caller gave
            every output; None is returned).

    Returns:
        The engine handle ids, or with ``sync`` the results in order.
    """
    if world.now.dropped:  # operations dropped earlier are released as new ones start
        sweep()
    if op.__class__ is not int or op not in ENGINE_OPS:  # the op's one check (module contracts)
        op = check_op(op)
    wake = not sync
    if name.__class__ is not str:
        ids = enqueue_group(kind, name, input, output, dtype, op=op, root=root, prescale=prescale,
                            postscale=postscale, wake=wake, process_set=process_set, streams=stream or ())
    elif kind == ALLREDUCE and not stream and shape is None and input.__class__ in _HOST and output is not None:
        ids = [enqueue_reduce(kind, name, input, output, dtype, op, prescale, postscale, process_set, wake)]
    else:
        if shape is None:
            shape = input[2] if input.__class__ is tuple else input.shape
        ids = [enqueue(kind, name, input, output, dtype, shape, op=op, root=root, prescale=prescale,
                       postscale=postscale, splits=splits, wake=wake, process_set=process_set, stream=stream)]
    if not sync:
        return ids
    try:
        return wait_all(ids, results)
    except RingError:  # the operation's own error: every handle is released
        raise
    except BaseException:  # a signal handler's: the engine may still use the buffers
        drop(ids, keep)
        raise


# The three ways into the engine's queue, each the one place its argument
# list is spelled on the Python side (native/bindings/module.cc the other):
# front ends call submit(), which picks one.
def enqueue(kind: int, name: str, input: Any, output: Any, dtype_code: int, shape: Sequence[int], *, op: Any = 0,
            root: Any = 0, prescale: float = 1.0, postscale: float = 1.0, splits: Sequence[int] = (),
            wake: bool = True, process_set: int = 0, stream: int = 0) -> int:
    """Queues one operation; returns its handle id. ``wake=False`` when the
    caller waits for it at once (the waiting thread makes the progress)."""
    root = check_root(root) if kind == BROADCAST else 0  # only a broadcast has a root
    return _rt().enqueue(
        kind, name, input, output, dtype_code, op, root, float(prescale), float(postscale),
        shape if shape.__class__ is tuple else [int(d) for d in shape],
        splits if splits == () else [int(s) for s in splits], wake, "", process_set, stream,
    )


def enqueue_reduce(kind: int, name: str, input: Any, output: Any, dtype_code: int, op: Any, prescale: Any,
                   postscale: Any, process_set: int = 0, wake: bool = False) -> int:
    """:func:`enqueue` of a reduction of host memory shaped as ``input``,
    with no splits: one engine call with few arguments."""
    return _rt().enqueue_reduce(kind, name, input, output, dtype_code, op, float(prescale), float(postscale),
                                process_set, wake)


def enqueue_group(kind: int, names: Sequence[str], inputs: List[Any], outputs: Optional[List[Any]],
                  dtype_codes: Sequence[int], *, op: Any = 0, root: Any = 0, prescale: float = 1.0,
                  postscale: float = 1.0, wake: bool = True, process_set: int = 0,
                  streams: Sequence[int] = ()) -> List[int]:
    """Queues one operation per name in one engine call (every member
    checked before any is queued); returns their handle ids, in order."""
    root = check_root(root) if kind == BROADCAST else 0  # only a broadcast has a root
    return _rt().enqueue_group(
        kind, names, inputs, outputs, dtype_codes, None, op, root, float(prescale),
        float(postscale), wake, process_set, streams,
    )


def wait_all(handle_ids: Sequence[int], results: bool = True) -> Optional[List[Result]]:
    """Waits for every handle and releases it: their results in order (None
    with ``results=False``). When some failed, the first one's error is
    raised once every handle is released; see the module's contracts for
    signals. The one way the core waits."""
    rt = _rt()
    if len(handle_ids) == 1:
        result = rt.wait_release(handle_ids[0], results)
        return [result] if results else None
    return rt.wait_release_group(handle_ids, results)


def poll(handle_id: int) -> bool:
    """True when the handle has finished."""
    return _rt().poll(handle_id)


def release(handle_id: int) -> Result:
    """Forgets a finished handle; returns its result or raises its error."""
    return _rt().release(handle_id)


class _Dropped:
    """Handles nobody will wait for, with their buffers (compared by identity)."""

    __slots__ = ("ids", "keep")

    def __init__(self, ids: List[int], keep: Any):
        self.ids, self.keep = ids, keep


def drop(ids: List[int], keep: Any) -> None:
    """Hands over handles nobody will wait for: they are released, and
    ``keep`` (their buffers) let go, once the engine has finished them."""
    world.now.dropped.append(_Dropped(ids, keep))


def sweep() -> None:
    """Releases the dropped operations the engine has finished (those of an
    ended world are simply forgotten by the next ``init()``)."""
    if not _sweep_lock.acquire(blocking=False):
        return  # another thread is sweeping
    try:
        dropped = world.now.dropped
        for entry in list(dropped):
            try:
                if not all(poll(i) for i in entry.ids):
                    continue
            except RingError:
                pass  # the job ended: nothing of it is in use any more
            for i in entry.ids:
                try:
                    release(i)
                except RingError:
                    pass  # its error: nobody is left to receive it
            dropped.remove(entry)
    finally:
        _sweep_lock.release()


# ---------------------------------------------------------------- process sets
def add_set(set_id: int, ranks: Sequence[int]) -> None:
    """Registers process set ``set_id`` in this rank's engine."""
    _rt().add_process_set(set_id, list(ranks))


def remove_set(set_id: int) -> None:
    """Drops process set ``set_id`` from this rank's engine (refused while
    this rank has operations of it in flight)."""
    _rt().remove_process_set(set_id)


def wait_set_idle(set_id: int, timeout: float) -> bool:
    """Waits, at most ``timeout`` seconds, until this rank has no unfinished
    operation of set ``set_id`` from any front end or framework kernel."""
    return _rt().wait_set_idle(set_id, timeout)


# ---------------------------------------------------------------- timeline and queries
def start_timeline(path: str, mark_cycles: bool) -> None:
    _rt().start_timeline(path, mark_cycles)


def stop_timeline() -> None:
    _rt().stop_timeline()


def cpus_per_rank() -> Optional[float]:
    """The engine's CPU budget per rank, or None when no world runs."""
    rt = world.now.runtime
    return None if rt is None else rt.cpus_per_rank()
