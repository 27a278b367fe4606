"""Process-level API: init, shutdown and where this process sits in the job.

``init()`` starts an engine, meets the other ranks (the rendezvous of
:mod:`ring_strategy.runner.rendezvous`) and makes the new world current
(:mod:`ring_strategy._core.world`); ``shutdown()`` ends it. The queries
read the current world.
"""

from __future__ import annotations

import atexit
import os
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from ring_strategy import _config_values, _contracts
from ring_strategy._core import engine, handles, registry, world
from ring_strategy.environments import ClusterEnvironment, detect_environment
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.launcher_watch import watch_launcher

if TYPE_CHECKING:
    from ring_strategy import _native


def _start_timeout() -> float:
    """Seconds to wait for every rank at the rendezvous (ringrun --start-timeout)."""
    try:
        return _config_values.read(os.environ, _config_values.POSITIVE_SECONDS, _contracts.START_TIMEOUT,
                                   default=300.0)
    except ValueError as e:
        raise BadArgumentError(str(e)) from None


# The running world's engine and place in the job (ShutdownError when none
# runs), under the names other modules and tests use.
_runtime = world.runtime
_env = world.env


class _StateView:
    """The current world's runtime, env and generation, read-only, under the
    former ``basics._state`` names."""

    @property
    def runtime(self) -> "Optional[_native.Runtime]":
        return world.current().runtime

    @property
    def env(self) -> Optional[ClusterEnvironment]:
        return world.current().env

    @property
    def generation(self) -> int:
        return world.current().generation


_state = _StateView()


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Joins the job: finds this process's rank, connects to every peer and
    starts the background engine.

    Under ``ringrun`` (or another supported launcher) the job's layout comes
    from the environment; without one the process is a world of size 1.
    Calling ``init()`` again while initialized does nothing.

    Args:
        comm: Horovod's MPI communicator argument; only None is supported.
        process_sets: process sets to register on every rank (a list of
            ``ProcessSet`` or of rank lists), or ``"dynamic"`` to allow
            ``add_process_set`` / ``remove_process_set`` later
            (:mod:`ring_strategy.process_sets`).
    """
    if comm is not None:
        raise NotImplementedError("init(comm=...): MPI communicators are not supported; use process_sets= instead")
    with world.lock():
        if world.current().runtime is not None:
            return
        env = detect_environment()
        start_timeout = _start_timeout()  # checked in every process, before anything starts

        def meet(endpoint: str, connect: Callable[[List[str]], None]) -> None:
            if env.size == 1:
                connect([endpoint])
                return
            from ring_strategy.runner.rendezvous import rendezvous

            generation = world.current().generation if env.world_generation is None else env.world_generation
            rendezvous(env, endpoint, connect, generation, start_timeout)

        ended = world.begin(engine.open_runtime(env, meet), env)
        handles.leave_behind(ended)  # the ended world's handles and automatic names are left behind
    watch_launcher()  # a worker whose ringrun was killed stops itself
    registry.start(process_sets)


def shutdown() -> None:
    """Leaves the job, and so ends it on every rank. Here later operations
    raise ``ShutdownError``; on the other ranks, operations still in flight
    and later ones raise ``PeerFailureError`` naming this rank (it left).
    Safe to call more than once."""
    with world.lock():
        rt = world.end()
    if rt is not None:
        engine.close_runtime(rt)


atexit.register(shutdown)


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return world.current().runtime is not None


def rank() -> int:
    """This process's rank in [0, size())."""
    return _env().rank


def size() -> int:
    """Number of processes in the job."""
    return _env().size


def local_rank() -> int:
    """This process's rank among the processes on its host."""
    return _env().local_rank


def local_size() -> int:
    """Number of processes on this host."""
    return _env().local_size


def cross_rank() -> int:
    """Index of this host among the job's hosts."""
    return _env().cross_rank


def cross_size() -> int:
    """Number of hosts in the job."""
    return _env().cross_size
