"""The worlds of an elastic job whose workers a cluster manager runs (Ray
actors, Spark tasks) and whose driver is not ringrun's.

The driver plays the part of ringrun's elastic driver: each worker is an
elastic worker (numbered in the order the driver learns of it,
``RING_ELASTIC_WORKER``), and :class:`Worlds` publishes each world in the
driver's store (the records of :mod:`ring_strategy.runner.membership`), where
the workers' ``ElasticEnvironment`` finds it. The driver tells it what
happened; it decides the next world:

- a worker that joins (:meth:`Worlds.join`): the next world adds it (once
  there are at least ``min_workers``), and the others reset into it at their
  next commit, where it receives their state;
- a worker lost (:meth:`Worlds.lost`: killed, its process gone): the others
  form the next world without it, once at least ``min_workers`` are left;
- a worker that finished (:meth:`Worlds.finished`): the next world, if any
  forms, leaves it out;
- every member of the current world asked for the next one (an elastic reset
  after a timeout, say; :meth:`Worlds.poll_resets`): the same members form it.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ring_strategy import _contracts as names
from ring_strategy.runner.membership import World, form_world, publish_world
from ring_strategy.runner.store import StoreClient

__all__ = ["Worlds"]


class Worlds:
    """Forms and publishes the worlds of one elastic job.

    Args:
        address: ``host:port`` of the driver's store.
        secret: The job secret.
        job_id: The job id.
        members: ``(worker, host)`` of the first world's workers; none: no world yet.
        min_workers: The fewest workers a world may have.
        timeout: Seconds for the store's replies.
        reset_limit: The most worlds formed after the first, or None for no limit.
    """

    def __init__(self, address: str, secret: bytes, job_id: str, members: List[Tuple[int, str]],
                 min_workers: int, timeout: float, reset_limit: Optional[int] = None) -> None:
        self.job_id = job_id
        self.min_workers = min_workers
        self.reset_limit = reset_limit
        self.hosts: Dict[int, str] = dict(members)
        self.members: List[int] = [w for w, _ in members]
        self.world: Optional[World] = None
        self._client = StoreClient(address, secret, timeout=timeout)
        if members:
            self.publish()

    def close(self) -> None:
        self._client.close()

    def join(self, joined: Mapping[int, str]) -> bool:
        """Adds the workers ``joined`` (worker -> host) to the next world; publishes
        it when there are at least ``min_workers``. Returns whether it did."""
        for worker, host in joined.items():
            self.hosts[worker] = host
            self.members.append(worker)
        if not joined or len(self.members) < self.min_workers:
            return False
        self.publish()
        return True

    def lost(self, worker: int) -> bool:
        """Takes ``worker`` out; publishes the next world when at least
        ``min_workers`` are left. Returns whether it did."""
        self.members.remove(worker)
        if len(self.members) < self.min_workers:
            return False
        self.publish()
        return True

    def finished(self, worker: int) -> None:
        """Takes ``worker`` out of the next world (it publishes none)."""
        self.members.remove(worker)

    def poll_resets(self) -> None:
        """Publishes the next world of the same members when every member has asked for it."""
        if self.world is None or not self.members:
            return
        g = self.world.generation
        if all(self._client.try_get(names.elastic_key(self.job_id, "reset", g, w)) is not None
               for w in self.members):
            self.publish()

    def publish(self) -> None:
        """Publishes the world of the current members.

        Raises:
            RuntimeError: If it would exceed ``reset_limit``.
        """
        generation = 1 if self.world is None else self.world.generation + 1
        if self.reset_limit is not None and generation - 1 > self.reset_limit:
            raise RuntimeError(f"the elastic job would reset more than reset_limit={self.reset_limit} times")
        world = form_world(generation, [(w, self.hosts[w]) for w in self.members], self.world)
        publish_world(self._client, self.job_id, world)
        self.world = world
