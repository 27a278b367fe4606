"""The actors an elastic :class:`~ring_strategy.ray.RayExecutor` asks Ray
for beyond the ones running, so that the job grows when the cluster has room.

Contract: while a job has fewer than ``max_workers`` actors, :class:`Spares`
keeps ``max_workers - running`` actor creations queued in Ray (outside the
job's placement group, with the same resources per actor). Ray starts one
when the cluster has the resources (a node joins, another job ends); it is
then *ready* once it has answered where it runs. :meth:`Spares.take_ready`
never blocks, so the executor polls it while a call runs. Spares that never
start cost nothing but a queued request; :meth:`Spares.kill` cancels them.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

__all__ = ["Spares"]


class Spares:
    """Queued actor creations of one elastic executor job.

    Args:
        make_actor: Creates one actor (not yet started by Ray).
        max_workers: The most actors the job may have running.
    """

    def __init__(self, make_actor: Callable[[], Any], max_workers: int) -> None:
        self._make_actor = make_actor
        self.max_workers = max_workers
        self._queued: Dict[Any, Any] = {}  # ref of node() -> actor

    def request(self, running: int) -> None:
        """Queues creations until ``running`` plus the queued ones reach ``max_workers``."""
        while running + len(self._queued) < self.max_workers:
            actor = self._make_actor()
            self._queued[actor.node.remote()] = actor

    def take_ready(self, ray: Any) -> List[Tuple[Any, Tuple[str, str]]]:
        """The queued actors Ray has started, each with its ``(node id, node ip)``;
        they are no longer queued. An actor that died starting is dropped."""
        if not self._queued:
            return []
        done, _ = ray.wait(list(self._queued), num_returns=len(self._queued), timeout=0)
        ready = []
        for ref in done:
            actor = self._queued.pop(ref)
            try:
                ready.append((actor, tuple(ray.get(ref))))
            except ray.exceptions.RayActorError:
                continue
        return ready

    def kill(self, ray: Any) -> None:
        """Cancels every queued creation."""
        for actor in self._queued.values():
            ray.kill(actor, no_restart=True)
        self._queued.clear()
