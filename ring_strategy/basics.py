"""Process-level API: init, shutdown and where this process sits in the job."""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ring_strategy import _config_values, _contracts, _native
from ring_strategy.environments import ClusterEnvironment, detect_environment
from ring_strategy.exceptions import BadArgumentError, ShutdownError
from ring_strategy.launcher_watch import watch_launcher

if TYPE_CHECKING:
    from ring_strategy.runner.store import StoreClient, StoreServer



def _start_timeout() -> float:
    """Seconds to wait for every rank at the rendezvous (ringrun --start-timeout)."""
    try:
        return _config_values.read(os.environ, _config_values.POSITIVE_SECONDS, _contracts.START_TIMEOUT,
                                   default=300.0)
    except ValueError as e:
        raise BadArgumentError(str(e)) from None


@dataclass
class _State:
    runtime: Optional[_native.Runtime] = None
    env: Optional[ClusterEnvironment] = None
    # Worlds started so far: the current (or last) world's number, 0 before
    # the first init(). Operations and rendezvous keys carry it.
    generation: int = 0


_state = _State()
_lock = threading.Lock()


def _runtime() -> _native.Runtime:
    rt = _state.runtime
    if rt is None:
        raise ShutdownError("ring is not initialized: call ring_strategy.init() first")
    return rt


def _env() -> ClusterEnvironment:
    if _state.env is None:
        raise ShutdownError("ring is not initialized: call ring_strategy.init() first")
    return _state.env


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
    with _lock:
        if _state.runtime is not None:
            return
        env = detect_environment()
        start_timeout = _start_timeout()  # checked in every process, before anything starts
        rt = _native.Runtime(
            rank=env.rank,
            size=env.size,
            local_rank=env.local_rank,
            local_size=env.local_size,
            cross_rank=env.cross_rank,
            cross_size=env.cross_size,
            secret=env.secret or b"",
            job_id=env.job_id,
            host_id=env.host_id,
            bind_host=env.bind_host,
            advertise_host=env.advertise_host,
        )
        if env.size > 1:
            world = env.world_generation
            _rendezvous(env, rt, _state.generation if world is None else world, start_timeout)
        else:
            rt.connect([rt.local_endpoint()])
        rt.start()
        from ring_strategy import _handles

        _state.generation += 1
        _handles.start_world()  # the ended world's handles and automatic names are left behind
        _state.runtime, _state.env = rt, env
    watch_launcher()  # a worker whose ringrun was killed stops itself
    from ring_strategy import process_sets as _process_sets

    _process_sets._start_world(process_sets)


def _rendezvous(env: ClusterEnvironment, rt: _native.Runtime, generation: int, timeout: float) -> None:
    """Publishes this rank's endpoint, reads every peer's and connects.

    Under a launcher that serves no store (torchrun, mpirun, Slurm), rank 0
    serves it for the duration of the rendezvous.
    """
    from ring_strategy.runner.store import StoreClient

    if env.rendezvous_address is None or env.secret is None:
        raise ShutdownError(
            f"rank {env.rank} of {env.size}: the launcher gave no rendezvous address or secret"
        )
    server = _serve_rendezvous(env)
    try:
        store = StoreClient(env.rendezvous_address, env.secret, timeout=timeout)
        try:
            prefix = _contracts.rendezvous_key(env.job_id, generation)
            store.set(f"{prefix}/endpoint/{env.rank}", rt.local_endpoint().encode())
            endpoints = [
                store.get(f"{prefix}/endpoint/{r}", timeout=timeout).decode()
                for r in range(env.size)
            ]
            rt.connect(endpoints)
            # Every rank must have mapped the others' shared memory before names
            # are removed in start().
            _all_reach(store, f"{prefix}/connected", env, timeout)
            _finish(store, f"{prefix}/done", env, timeout, serving=server is not None)
        finally:
            store.close()
    finally:
        if server is not None:
            server.stop()


def _all_reach(store: "StoreClient", key: str, env: ClusterEnvironment, timeout: float) -> None:
    """Marks ``key`` reached by this rank and waits until every rank has."""
    store.set(f"{key}/{env.rank}", b"1")
    for r in range(env.size):
        store.get(f"{key}/{r}", timeout=timeout)


def _finish(store: "StoreClient", key: str, env: ClusterEnvironment, timeout: float, serving: bool) -> None:
    """Tells the rank serving the store (if any) that this rank no longer needs it.

    The serving rank waits for every rank's word, so no one is still reading
    when it stops the store. It may stop it while the last word's reply is on
    its way: the word was stored by then, so a lost connection here is fine.
    """
    if serving:
        _all_reach(store, key, env, timeout)
        return
    try:
        store.set(f"{key}/{env.rank}", b"1")
    except ConnectionError:
        pass


def _serve_rendezvous(env: ClusterEnvironment) -> "Optional[StoreServer]":
    """Starts the store this process must serve (rank 0 without a launcher's store), if any."""
    from ring_strategy.runner.store import StoreServer

    address = env.rendezvous_bind_address
    if address is None:
        return None
    host, _, port = address.rpartition(":")
    server = StoreServer(env.secret or b"", host=host.strip("[]"), port=int(port))
    try:
        server.start()
    except OSError as e:
        raise OSError(
            e.errno,
            f"rank {env.rank} cannot serve the rendezvous store on {address}: {e.strerror or e}; "
            "if another job holds the port, set RING_RENDEZVOUS_PORT to a free one",
        ) from None
    return server


def shutdown() -> None:
    """Leaves the job, and so ends it on every rank. Here later operations
    raise ``ShutdownError``; on the other ranks, operations still in flight
    and later ones raise ``PeerFailureError`` naming this rank (it left).
    Safe to call more than once."""
    with _lock:
        rt, _state.runtime = _state.runtime, None
        _state.env = None
    if rt is not None:
        rt.shutdown()


atexit.register(shutdown)


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return _state.runtime is not None


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
