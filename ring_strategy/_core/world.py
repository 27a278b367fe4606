"""Layer 2 of the core: the world, one object per ``init()``.

A :class:`World` holds everything that lives from one ``init()`` to its
``shutdown()`` (or from one elastic reset to the next): the engine runtime,
this process's place in the job, the world's generation number, the
operations in flight that the front ends hold, the automatic names handed
out so far, and the registered process sets. It is the one place of that
state, as torch.distributed's ``_World`` is for process groups:
``init()`` makes a new one (:func:`begin`), ``shutdown()`` ends it
(:func:`end`), and every other module of the core reads it as
:data:`now` (data, not a call: reading the world is not entering a layer).

Contracts:

- ``generation`` counts the worlds started in this process: 0 before the
  first ``init()``, then 1, 2, ... An ended world keeps its number until the
  next begins, so handles of it are recognised as stale.
- The fields are only replaced wholesale or mutated with operations that are
  atomic under the GIL (dict and list methods), so front ends may submit and
  wait from several threads.
- Nothing here calls the engine: :mod:`ring_strategy._core.engine` does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ring_strategy.exceptions import ShutdownError

if TYPE_CHECKING:
    from ring_strategy import _native
    from ring_strategy.environments import ClusterEnvironment

NOT_INITIALIZED = "ring is not initialized: call ring_strategy.init() first"


class SetPlace(NamedTuple):
    """Where this rank stands in a process set: the engine's id, the set's
    size and this rank's index in it."""

    id: int
    size: int
    rank: int


@dataclass(eq=False)
class World:
    """One ``init()`` to its ``shutdown()``.

    Args:
        generation: the world's number in this process (see the module's contracts).
        runtime: the engine (None before the first ``init()`` and once ended).
        env: the launcher's view of this process's place in the job.
    """

    generation: int = 0
    runtime: Optional["_native.Runtime"] = None
    env: Optional["ClusterEnvironment"] = None
    # ---- operations (ring_strategy._core.handles, ring_strategy._core.engine)
    live: Dict[int, Any] = field(default_factory=dict)  # integer handle -> operation not yet synchronized
    dropped: List[Any] = field(default_factory=list)  # engine ids and buffers to release when done (engine.drop)
    names: Dict[Tuple[str, int], Iterator[int]] = field(default_factory=dict)  # (label, set id) -> counter
    # ---- process sets (ring_strategy._core.registry)
    sets: Dict[int, Any] = field(default_factory=dict)  # id -> registered ProcessSet (not the global one)
    next_set_id: int = 1
    dynamic: bool = False
    # This rank's place in the global set while the world runs (a stale one
    # after shutdown() only reaches an engine call, which says so).
    global_place: Optional[SetPlace] = None


#: The world running now, or the last one (ended) when none runs. Read it
#: as ``world.now`` (never ``from ... import now``: begin() replaces it).
now = World()
_lock = threading.Lock()  # serializes begin() and end()


def current() -> World:
    """:data:`now`."""
    return now


def lock() -> threading.Lock:
    """Held by ``init()`` and ``shutdown()`` while they make or end a world."""
    return _lock


def runtime() -> "_native.Runtime":
    """The running world's engine; ShutdownError when none runs."""
    rt = now.runtime
    if rt is None:
        raise ShutdownError(NOT_INITIALIZED)
    return rt


def env() -> "ClusterEnvironment":
    """The running world's place in the job; ShutdownError when none runs."""
    e = now.env
    if e is None:
        raise ShutdownError(NOT_INITIALIZED)
    return e


def begin(rt: "_native.Runtime", environment: "ClusterEnvironment") -> World:
    """Makes the world of a started engine current (called by ``init()``
    under :func:`lock`) and returns the world it replaces."""
    global now
    ended = now
    now = World(generation=ended.generation + 1, runtime=rt, env=environment,
                     global_place=SetPlace(0, environment.size, environment.rank))
    return ended


def end() -> Optional["_native.Runtime"]:
    """Ends the running world (called by ``shutdown()`` under :func:`lock`):
    returns its engine for the caller to shut down, None when none runs.
    The world stays current, with its generation, until the next begins."""
    rt, now.runtime = now.runtime, None
    now.env = None
    return rt
