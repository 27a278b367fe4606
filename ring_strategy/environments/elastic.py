"""The environment of a worker started by ``ringrun``'s elastic driver.

Such a worker has no fixed rank. Each ``init()`` makes an
:class:`ElasticEnvironment`, which asks the driver's store for the world
(generation) this worker takes part in and waits for it: the first one
that places the worker, and after :func:`leave_world` (an elastic reset) the
next one. While a world lasts, a background thread watches the store for
the driver's next world, so :func:`host_updates` answers without
communicating. The store's keys and values are described in
:mod:`ring_strategy.runner.membership`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Mapping, Optional, Tuple

from ring_strategy import _config_values, _contracts as names
from ring_strategy.environments.base import ClusterEnvironment, override
from ring_strategy.environments.network import is_loopback, join_address, route_address, split_address
from ring_strategy.environments.ringrun import _address, _int, _job_id, _secret

__all__ = [
    "DEFAULT_ELASTIC_TIMEOUT", "ElasticEnvironment", "WorkerRemoved", "ask_for_next_world", "current_generation",
    "host_updates", "leave_world",
]

#: Seconds (``RING_ELASTIC_TIMEOUT``) by default.
DEFAULT_ELASTIC_TIMEOUT = 600.0
# How long one wait of the watching thread lasts (it checks whether to stop in between).
_WATCH_POLL_SECONDS = 0.5

_lock = threading.Lock()
_current = None  # the World this process was last placed in
_stale = False  # leave_world() was called: the next environment waits for a newer world
_watch: Optional["_NextWorldWatch"] = None


class WorkerRemoved(SystemExit):
    """The elastic driver asked this worker to leave the job (its host is no
    longer listed). Uncaught, the process exits with status 0, which the
    driver counts as a removal, not a failure."""

    def __init__(self, worker: int, generation: int) -> None:
        super().__init__(0)
        self.worker, self.generation = worker, generation

    def __str__(self) -> str:
        return f"worker {self.worker} was removed from the job in world {self.generation}"


def elastic_timeout(environ: Mapping[str, str]) -> float:
    """``RING_ELASTIC_TIMEOUT`` (or ``HOROVOD_ELASTIC_TIMEOUT``) in seconds, checked."""
    return _config_values.read(environ, _config_values.POSITIVE_SECONDS, names.ELASTIC_TIMEOUT,
                               "HOROVOD_ELASTIC_TIMEOUT", default=DEFAULT_ELASTIC_TIMEOUT)


class ElasticEnvironment(ClusterEnvironment):
    """Reads ``RING_ELASTIC_WORKER`` and the job's variables, then the world
    the driver places this worker in (waiting for it up to
    ``RING_ELASTIC_TIMEOUT`` seconds).

    The engine runs under the world's job id (:func:`~ring_strategy._contracts.world_job_id`),
    and the rendezvous keys carry the world's number, so no process of one
    world can join another.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid.
        TimeoutError: If no world placed this worker in time.
        WorkerRemoved: If the driver asked this worker to leave.
    """

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        self.worker = _int(env, names.ELASTIC_WORKER, minimum=0)
        address = _address(env, names.RENDEZVOUS_ADDR, required=True)
        secret = _secret(env, names.SECRET, required=True)
        job_id = _job_id(env, required=True)
        assert address is not None and secret is not None
        world = _world_for(self.worker, address, secret, job_id, elastic_timeout(env))
        layout = world.layout(self.worker)
        assert layout is not None
        super().__init__(layout, rendezvous_address=address, secret=secret,
                         job_id=names.world_job_id(job_id, world.generation),
                         host_id=env.get(names.HOSTNAME) or "localhost")
        self._generation = world.generation
        # The other hosts of the world, by the names the driver placed workers on.
        self._peer_hosts = [h for _, h in world.members if h.lower() != self.host_id.lower()]

    @classmethod
    @override
    def detect(cls) -> bool:
        return names.ELASTIC_WORKER in os.environ

    @property
    @override
    def world_generation(self) -> Optional[int]:
        return self._generation

    @override
    def routed_address(self) -> str:
        """This host's address on the route to the first other host of the
        world that is not a loopback name (workers may be placed on other
        machines at any world, so the address is chosen per world); loopback
        when there is none."""
        far = next((h for h in self._peer_hosts if not is_loopback(h)), None)
        if far is None:
            return "127.0.0.1"
        port = split_address(self.rendezvous_address)[1] if self.rendezvous_address else 22
        return route_address(join_address(far, port))

    @property
    @override
    def bind_host(self) -> str:
        # "Hosts" that are all this machine (loopback addresses) listen on loopback only.
        return "127.0.0.1" if is_loopback(self.advertise_host) else super().bind_host


def leave_world() -> None:
    """Makes the next :class:`ElasticEnvironment` wait for a world newer than
    this process's last one (call it after ``shutdown()``, before ``init()``)."""
    global _stale, _watch
    with _lock:
        _stale = _current is not None
        if _watch is not None:
            _watch.stop()
            _watch = None


def current_generation() -> int:
    """The world this process was last placed in (0: none, or not an elastic worker)."""
    world = _current
    return 0 if world is None else world.generation


def ask_for_next_world() -> None:
    """Tells the driver that this worker is leaving its current world for
    the next one (an elastic reset); does nothing outside an elastic job.

    When some members of a world ask and the others neither ask nor exit
    soon after, the driver takes those for lost (a stopped or hung worker).
    """
    world = _current
    if world is None or names.ELASTIC_WORKER not in os.environ:
        return
    from ring_strategy.runner.store import StoreClient

    env = os.environ
    secret, job_id = _secret(env, names.SECRET, required=True), _job_id(env, required=True)
    assert secret is not None
    try:
        with StoreClient(env[names.RENDEZVOUS_ADDR], secret, timeout=10.0) as store:
            store.set(names.elastic_key(job_id, "reset", world.generation, env[names.ELASTIC_WORKER]), b"1")
    except (ConnectionError, OSError):
        pass  # the driver is gone: the job is ending


def host_updates() -> Tuple[bool, bool]:
    """``(updated, skip_sync)``: whether the driver has formed a world after
    this process's current one, and whether it only lost workers (so the
    members need no sync). ``(False, False)`` outside an elastic job."""
    watch = _watch
    return (False, False) if watch is None else watch.state()


def _world_for(worker: int, address: str, secret: bytes, job_id: str, timeout: float):
    """This process's current world, or the next one that places ``worker``."""
    global _current, _stale, _watch
    with _lock:
        if _current is not None and not _stale:
            return _current
        after = 0 if _current is None else _current.generation
        world = _wait_for_world(worker, address, secret, job_id, after, timeout)
        _current, _stale = world, False
        if _watch is not None:
            _watch.stop()
        _watch = _NextWorldWatch(address, secret, job_id, world.generation)
        return world


def _wait_for_world(worker: int, address: str, secret: bytes, job_id: str, after: int, timeout: float):
    """The first world after ``after`` that is the driver's latest and places ``worker``."""
    from ring_strategy.runner.membership import World
    from ring_strategy.runner.store import StoreClient

    deadline = time.monotonic() + timeout
    wanted = after + 1
    with StoreClient(address, secret, timeout=min(timeout, 60.0)) as store:

        def get(*key: object) -> bytes:
            try:
                return store.get(names.elastic_key(job_id, *key), timeout=max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise TimeoutError(
                    f"elastic worker {worker}: no world of job {job_id} placed it within {timeout:g} s "
                    f"({names.ELASTIC_TIMEOUT}); waiting for world {wanted}"
                ) from None

        while True:
            wanted = max(wanted, int(get("latest")))
            world = World.decode(get("world", wanted))
            if int(get("latest")) > wanted:
                continue  # a newer world already
            if worker in world.removed:
                print(f"ring: elastic worker {worker} (pid {os.getpid()}) was removed from the job; "
                      "exiting", file=sys.stderr, flush=True)
                raise WorkerRemoved(worker, wanted)
            if world.layout(worker) is not None:
                return world
            wanted += 1


class _NextWorldWatch:
    """Watches the driver's store, in a thread, for the worlds after ``generation``."""

    def __init__(self, address: str, secret: bytes, job_id: str, generation: int) -> None:
        self._stopped = threading.Event()
        self._updated = False
        self._skip_sync = True
        threading.Thread(target=self._run, args=(address, secret, job_id, generation),
                         name="ring-elastic-watch", daemon=True).start()

    def state(self) -> Tuple[bool, bool]:
        updated = self._updated
        return updated, updated and self._skip_sync

    def stop(self) -> None:
        self._stopped.set()

    def _run(self, address: str, secret: bytes, job_id: str, generation: int) -> None:
        from ring_strategy.runner.membership import World
        from ring_strategy.runner.store import StoreClient

        try:
            with StoreClient(address, secret) as store:
                following = generation + 1
                while not self._stopped.is_set():
                    try:
                        raw = store.get(names.elastic_key(job_id, "world", following), timeout=_WATCH_POLL_SECONDS)
                    except TimeoutError:
                        continue
                    world = World.decode(raw)
                    self._skip_sync = self._skip_sync and world.skip_sync
                    self._updated = True
                    following += 1
        except (ConnectionError, OSError, ValueError):
            return  # the driver is gone (the job is ending)
