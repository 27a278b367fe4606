"""RayExecutor: the workers of a ring job as Ray actors."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ring_strategy import _contracts as names
from ring_strategy._contracts import remove_job_shm
from ring_strategy.ray.elastic import RayWorlds
from ring_strategy.ray.spares import Spares
from ring_strategy.ray.worker import RingWorker
from ring_strategy.runner.launch import DEFAULT_START_TIMEOUT_SECONDS
from ring_strategy.runner.placement import Placement, place, placement_environment
from ring_strategy.runner.store import StoreServer
from ring_strategy.runner.worker_env import elastic_worker_environment

__all__ = ["RayExecutor"]

_PLACEMENT_STRATEGIES = ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD")
# Seconds each actor may take to leave the job at shutdown before it is killed.
_LEAVE_TIMEOUT_SECONDS = 10.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(
            "ring_strategy.ray needs Ray: pip install -c constraints.txt 'ring-strategy[ray]'"
        ) from None
    return ray


@dataclass(frozen=True)
class _Joining:
    """What an actor joining an elastic job needs: the store's address and
    the job secret, the caller's extra environment, and the executable
    (class, args, kwargs) every actor runs."""

    address: str
    secret: bytes
    env: Dict[str, str]
    executable: Tuple[Any, Sequence[Any], Dict[str, Any]]


class RayExecutor:
    """Runs the ranks of a ring job as Ray actors, in the manner of ``horovod.ray.RayExecutor``.

    :meth:`start` reserves one placement-group bundle per worker (``PACK`` by
    default, so workers share nodes and talk through shared memory), starts
    one actor per bundle, numbers them node by node and gives each the
    ``RING_*`` environment ``ringrun`` would give a worker. The driver serves
    the rendezvous store with a fresh secret, as ``ringrun`` does. Functions
    sent with :meth:`run` or :meth:`execute` call ``ring_strategy.init()`` (or
    a front end's ``init()``) to join the job; the job lives until
    :meth:`shutdown`, across calls.

    Args:
        num_workers: The number of workers (ranks).
        cpus_per_worker: CPUs Ray reserves for each worker.
        use_gpu: Whether each worker reserves ``gpus_per_worker`` GPUs.
        gpus_per_worker: GPUs per worker when ``use_gpu`` (default 1).
        env_vars: Variables set in every worker process when it starts.
        placement_strategy: Ray placement-group strategy: ``"PACK"``
            (default), ``"STRICT_PACK"`` (all workers on one node), ``"SPREAD"``
            or ``"STRICT_SPREAD"``.
        start_timeout: Seconds to wait for resources, and for the workers to
            find each other at ``init()``.
        min_workers: Makes the job elastic: the fewest workers it goes on
            with. Functions then run as elastic scripts do under ``ringrun``
            (``ring_strategy.elastic.run`` and a state object): an actor lost
            while a function runs is left behind, the others re-form the job
            without it and go on (see :mod:`ring_strategy.ray.elastic`).
        max_workers: The most workers of an elastic job (``num_workers``
            when not given). While an elastic job has fewer, the executor
            keeps asking Ray for more actors (to replace lost ones, or to grow
            past ``num_workers``); each one Ray starts (a node joined,
            resources freed) joins the running call, and the others reset
            into the larger world at their next commit (see
            :mod:`ring_strategy.ray.spares`).

    Raises:
        ValueError: If an argument is invalid; the message quotes it.

    Example:
        >>> import ray, ring_strategy as rs
        >>> ray.init(num_cpus=2)
        >>> def fn():
        ...     rs.init()
        ...     return rs.rank()
        >>> executor = RayExecutor(num_workers=2)
        >>> executor.start()
        >>> executor.run(fn)
        [0, 1]
        >>> executor.shutdown()
    """

    def __init__(
        self,
        num_workers: int,
        cpus_per_worker: float = 1,
        use_gpu: bool = False,
        gpus_per_worker: Optional[float] = None,
        env_vars: Optional[Dict[str, str]] = None,
        placement_strategy: str = "PACK",
        start_timeout: float = DEFAULT_START_TIMEOUT_SECONDS,
        min_workers: Optional[int] = None,
        max_workers: Optional[int] = None,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers should be a positive integer. Got: {num_workers!r}")
        if cpus_per_worker < 0:
            raise ValueError(f"cpus_per_worker should not be negative. Got: {cpus_per_worker!r}")
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError(f"gpus_per_worker={gpus_per_worker!r} needs use_gpu=True")
        if placement_strategy not in _PLACEMENT_STRATEGIES:
            raise ValueError(
                f"placement_strategy should be one of {', '.join(_PLACEMENT_STRATEGIES)}. "
                f"Got: {placement_strategy!r}"
            )
        if not (math.isfinite(start_timeout) and start_timeout > 0):
            raise ValueError(f"start_timeout should be a positive number of seconds. Got: {start_timeout!r}")
        _check_elastic(num_workers, min_workers, max_workers)
        self.num_workers = num_workers
        self.min_workers = min_workers
        self.max_workers = num_workers if max_workers is None else max_workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (1 if gpus_per_worker is None else gpus_per_worker) if use_gpu else 0
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self.placement_strategy = placement_strategy
        self.start_timeout = float(start_timeout)
        self.job_id = ""
        self.placements: List[Placement] = []
        self._workers: List[Any] = []  # actor handles, by rank
        self._actors: List[Any] = []  # actor handles, in creation order
        self._placement_group: Any = None
        self._store: Optional[StoreServer] = None
        self._worlds: Optional[RayWorlds] = None
        self._spares: Optional[Spares] = None
        self._joining: Optional[_Joining] = None  # elastic jobs only

    # -- lifecycle ---------------------------------------------------------------

    def start(
        self,
        executable_cls: Optional[type] = None,
        executable_args: Optional[Sequence[Any]] = None,
        executable_kwargs: Optional[Dict[str, Any]] = None,
        extra_env_vars: Optional[Dict[str, str]] = None,
    ) -> None:
        """Starts the workers and the driver's rendezvous store.

        Args:
            executable_cls: A class instantiated in every worker; :meth:`execute`
                passes the instance to its function. None: it passes None.
            executable_args: Positional arguments of ``executable_cls``.
            executable_kwargs: Keyword arguments of ``executable_cls``.
            extra_env_vars: More variables set in every worker (before the
                ``RING_*`` ones, which win).

        Raises:
            RuntimeError: If already started.
            TimeoutError: If Ray cannot provide the resources within ``start_timeout``.
        """
        if self._workers:
            raise RuntimeError("RayExecutor is already started; call shutdown() first")
        ray = _ray()
        if not ray.is_initialized():
            ray.init()
        try:
            self._start(ray, executable_cls, list(executable_args or ()), dict(executable_kwargs or {}),
                        dict(extra_env_vars or {}))
        except BaseException:
            self.shutdown()
            raise

    def _start(self, ray: Any, cls: Optional[type], args: List[Any], kwargs: Dict[str, Any],
               extra_env: Dict[str, str]) -> None:
        self._placement_group = self._reserve(ray)
        self._actors = self._make_actors(ray)
        nodes = ray.get([a.node.remote() for a in self._actors], timeout=self.start_timeout)
        self.placements = place(nodes)
        self._workers = [self._actors[p.worker] for p in self.placements]
        self.job_id = f"ray-{secrets.token_hex(8)}"
        secret = secrets.token_bytes(32)
        address = self._serve(ray, {p.host_id for p in self.placements}, secret)
        if self.min_workers is not None:
            self._workers = list(self._actors)  # elastic: worker numbers are the actors' order
            self._joining = _Joining(address, secret, extra_env, (cls, args, kwargs))
            envs = [self._elastic_environment(worker, node) for worker, node in enumerate(nodes)]
            self._worlds = RayWorlds(address, secret, self.job_id, [(i, n[0]) for i, n in enumerate(nodes)],
                                     self.min_workers, self.start_timeout)
            self._spares = Spares(lambda: self._new_actor(ray, None), self.max_workers)
            self._spares.request(len(self._actors))
        else:
            envs = [
                {**extra_env, **placement_environment(
                    p, size=self.num_workers, rendezvous_address=address, secret=secret,
                    job_id=self.job_id, start_timeout=self.start_timeout)}
                for p in self.placements
            ]
        ray.get([w.set_env.remote(env) for w, env in zip(self._workers, envs)])
        ray.get([w.start_executable.remote(cls, args, kwargs) for w in self._workers])

    def _elastic_environment(self, worker: int, node: Any) -> Dict[str, str]:
        """The variables of elastic worker ``worker`` (its number: the actor's
        order), on Ray node ``(node id, node ip)``, of the executor's store."""
        node_id, node_ip = node
        joining = self._joining
        assert joining is not None, "an elastic job's actors only"
        env = elastic_worker_environment(
            {}, worker=worker, rendezvous_address=joining.address, secret=joining.secret,
            job_id=self.job_id, start_timeout=self.start_timeout, elastic_timeout=self.start_timeout,
            hostname=node_id)
        env[names.ADVERTISE_HOST] = node_ip  # peers on other nodes (now or after a spare joins) connect to it
        return {**joining.env, **env}

    def _join(self, ray: Any, start: Callable[[Any], Any], alive: int) -> Dict[int, Any]:
        """Admits the spare actors Ray started into the running call (``start``
        submits the call's function to an actor) and asks for more, up to
        ``max_workers`` with the ``alive`` ones.

        Returns:
            worker -> ``(ref of its call, node id)`` of each actor admitted.
        """
        if self._spares is None or self._joining is None:
            return {}
        joined = {}
        for actor, node in self._spares.take_ready(ray):
            worker = len(self._actors)
            self._actors.append(actor)
            self._workers.append(actor)
            actor.set_env.remote(self._elastic_environment(worker, node))  # an actor runs its calls in order
            actor.start_executable.remote(*self._joining.executable)
            joined[worker] = (start(actor), node[0])
        self._spares.request(alive + len(joined))
        return joined

    def _reserve(self, ray: Any) -> Any:
        from ray.util.placement_group import placement_group

        bundle = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker
        group = placement_group([dict(bundle) for _ in range(self.num_workers)],
                                strategy=self.placement_strategy)
        ready, _ = ray.wait([group.ready()], timeout=self.start_timeout)
        if not ready:
            ray.util.remove_placement_group(group)
            raise TimeoutError(
                f"Ray could not reserve {self.num_workers} x {bundle} ({self.placement_strategy}) within "
                f"{self.start_timeout:g} s; the cluster has {ray.cluster_resources()}"
            )
        return group

    def _make_actors(self, ray: Any) -> List[Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return [
            self._new_actor(ray, PlacementGroupSchedulingStrategy(
                placement_group=self._placement_group, placement_group_bundle_index=i))
            for i in range(self.num_workers)
        ]

    def _new_actor(self, ray: Any, scheduling_strategy: Any) -> Any:
        """One worker actor with the executor's resources (anywhere when
        ``scheduling_strategy`` is None)."""
        options: Dict[str, Any] = {"num_cpus": self.cpus_per_worker, "num_gpus": self.gpus_per_worker}
        if self.env_vars:
            options["runtime_env"] = {"env_vars": self.env_vars}
        if scheduling_strategy is not None:
            options["scheduling_strategy"] = scheduling_strategy
        return ray.remote(RingWorker).options(**options).remote()

    def _serve(self, ray: Any, worker_nodes: Set[str], secret: bytes) -> str:
        """Starts the store: on loopback when every worker shares the driver's
        node and no spare can start elsewhere (not elastic)."""
        local = worker_nodes == {ray.get_runtime_context().get_node_id()} and self.min_workers is None
        self._store = StoreServer(secret, host="127.0.0.1" if local else "0.0.0.0")
        self._store.start()
        port = self._store.address.rpartition(":")[2]
        return f"127.0.0.1:{port}" if local else f"{ray.util.get_node_ip_address()}:{port}"

    def shutdown(self) -> None:
        """Ends the job: the workers leave it, the actors are killed, the
        placement group, the store and the job's shared memory are removed.
        Safe to call more than once."""
        ray = _ray() if (self._actors or self._placement_group is not None) else None
        if ray is not None and self._spares is not None:
            self._spares.kill(ray)
        if ray is not None and self._actors:
            leaving = [a.leave.remote(self.job_id) for a in self._actors]
            ray.wait(leaving, num_returns=len(leaving), timeout=_LEAVE_TIMEOUT_SECONDS)
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
        if ray is not None and self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
        if self._worlds is not None:
            self._worlds.close()
        if self._store is not None:
            self._store.stop()
        if self.job_id:  # on the driver's node, where an actor that did not leave may have left some
            remove_job_shm(self.job_id)
        self._actors, self._workers, self._placement_group, self._store = [], [], None, None
        self._worlds, self._spares, self._joining = None, None, None

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- calls -------------------------------------------------------------------

    def _started(self) -> List[Any]:
        if not self._workers:
            raise RuntimeError("RayExecutor is not started: call start() first")
        return self._workers

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] = (),
                   kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """Starts ``fn(*args, **kwargs)`` on every worker without waiting.

        Returns:
            One Ray ``ObjectRef`` per worker, by rank.
        """
        return [self._runner(fn, args, kwargs)(w) for w in self._started()]

    @staticmethod
    def _runner(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Dict[str, Any]]):
        """Submits ``fn(*args, **kwargs)`` to one actor."""
        return lambda worker: worker.run.remote(fn, list(args), dict(kwargs or {}))

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (),
            kwargs: Optional[Dict[str, Any]] = None) -> List[Any]:
        """Runs ``fn(*args, **kwargs)`` on every worker.

        Args:
            fn: The function; it may call ``ring_strategy.init()`` and use any
                collective.
            args: Its positional arguments.
            kwargs: Its keyword arguments.

        Returns:
            Each worker's result, by rank; in an elastic job, each result of
            a worker that finished, in the order the actors were made.

        Raises:
            ray.exceptions.RayTaskError: The first error a worker raised.
            RuntimeError: In an elastic job, when fewer than ``min_workers``
                actors are left.
        """
        return self._gather(self._runner(fn, args, kwargs))

    def execute(self, fn: Callable[[Any], Any]) -> List[Any]:
        """Runs ``fn(executable)`` on every worker, ``executable`` being the
        object made from ``start(executable_cls=...)`` (None without one).

        Returns:
            Each worker's result, by rank.
        """
        return self._gather(lambda worker: worker.execute.remote(fn))

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(executable)`` on the rank 0 worker only and returns its result."""
        return _ray().get(self._started()[0].execute.remote(fn))

    def _gather(self, start: Callable[[Any], Any]) -> List[Any]:
        """Each worker's result of the call ``start`` submits to an actor (see
        :meth:`run`); an elastic job drops the actors it lost from then on,
        and adds the ones that joined."""
        ray = _ray()
        refs = [start(w) for w in self._started()]
        if self._worlds is None:
            return _gather(ray, refs)
        workers = {id(w): i for i, w in enumerate(self._actors)}
        results = self._worlds.gather(ray, {workers[id(w)]: ref for w, ref in zip(self._workers, refs)},
                                      lambda alive: self._join(ray, start, alive))
        workers = {id(w): i for i, w in enumerate(self._actors)}
        lost = set(workers.values()) - set(self._worlds.members) - set(results)
        self._workers = [w for w in self._workers if workers[id(w)] not in lost]
        return [results[workers[id(w)]] for w in self._workers if workers[id(w)] in results]


def _check_elastic(num_workers: int, min_workers: Optional[int], max_workers: Optional[int]) -> None:
    """Raises ValueError unless ``min_workers`` and ``max_workers`` fit ``num_workers``."""
    if min_workers is None:
        if max_workers is not None:
            raise ValueError(f"max_workers={max_workers!r} needs min_workers (an elastic job)")
        return
    if isinstance(min_workers, bool) or not isinstance(min_workers, int) or not 1 <= min_workers <= num_workers:
        raise ValueError(f"min_workers should be an integer from 1 to num_workers={num_workers}. Got: {min_workers!r}")
    if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)
                                    or max_workers < num_workers):
        raise ValueError(f"max_workers should be an integer of at least num_workers={num_workers}. "
                         f"Got: {max_workers!r}")


def _gather(ray: Any, refs: List[Any]) -> List[Any]:
    """Results of ``refs`` in order; raises as soon as any of them failed
    rather than waiting for ranks that may wait for the failed one."""
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)  # raises the worker's error
    return ray.get(refs)
