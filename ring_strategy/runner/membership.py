"""Worlds of an elastic job: which worker holds which rank in each generation.

The elastic driver numbers its workers in launch order (their age) and forms
each world from the workers it keeps: ranks follow age, so the oldest worker
is rank 0 and survivors keep their order; a worker's local rank and host
index follow from the hosts of the workers before it.

A world travels through the driver's store as JSON, under
``elastic_key(job_id, "world", g)`` (:mod:`ring_strategy._contracts`)::

    {"generation": g, "members": [[worker, host], ...] (rank order),
     "removed": [worker, ...], "skip_sync": bool}

``removed`` lists the workers the driver asks to leave (their host was
taken out of discovery): such a worker ends instead of joining.
``skip_sync`` is true when the world only lost workers since the one before
it, so every member already holds the same state.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from ring_strategy import _contracts as names
from ring_strategy.environments.base import Layout

if TYPE_CHECKING:
    from ring_strategy.runner.store import StoreClient

__all__ = ["World", "form_world", "publish_world"]


@dataclasses.dataclass(frozen=True)
class World:
    """One generation of an elastic job.

    Attributes:
        generation: The world's number, from 1.
        members: ``(worker, host)`` of each rank, in rank order.
        removed: Workers asked to leave the job.
        skip_sync: Whether the members need no sync (the world only lost workers).
    """

    generation: int
    members: Tuple[Tuple[int, str], ...]
    removed: Tuple[int, ...] = ()
    skip_sync: bool = False

    @property
    def workers(self) -> Tuple[int, ...]:
        """The members' worker numbers, in rank order."""
        return tuple(w for w, _ in self.members)

    def layout(self, worker: int) -> Optional[Layout]:
        """Where ``worker`` sits in this world, or None when it is not a member."""
        hosts = [h for _, h in self.members]
        if worker not in self.workers:
            return None
        rank = self.workers.index(worker)
        host = hosts[rank]
        distinct = list(dict.fromkeys(hosts))
        return Layout(
            rank=rank, size=len(hosts), local_rank=hosts[:rank].count(host), local_size=hosts.count(host),
            cross_rank=distinct.index(host), cross_size=len(distinct),
        )

    def encode(self) -> bytes:
        """The store's value for this world."""
        return json.dumps({
            "generation": self.generation, "members": [list(m) for m in self.members],
            "removed": list(self.removed), "skip_sync": self.skip_sync,
        }).encode()

    @classmethod
    def decode(cls, data: bytes) -> "World":
        """The world a store value describes.

        Raises:
            ValueError: If the value is not one :meth:`encode` wrote.
        """
        try:
            raw: Dict = json.loads(data.decode())
            return cls(
                generation=int(raw["generation"]),
                members=tuple((int(w), str(h)) for w, h in raw["members"]),
                removed=tuple(int(w) for w in raw["removed"]),
                skip_sync=bool(raw["skip_sync"]),
            )
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not an elastic world record: {data[:80]!r} ({e})") from None


def form_world(generation: int, members: Sequence[Tuple[int, str]], previous: Optional[World],
               removed: Sequence[int] = ()) -> World:
    """The world of ``members`` (``(worker, host)``), ranked by age.

    Args:
        generation: The new world's number.
        members: The workers to keep or admit, in any order.
        previous: The world before it, if any (decides ``skip_sync``).
        removed: Workers asked to leave.

    Returns:
        The world: the oldest worker (lowest number) is rank 0.
    """
    ordered = tuple(sorted((int(w), h) for w, h in members))
    skip = previous is not None and set(w for w, _ in ordered) <= set(previous.workers)
    return World(generation, ordered, tuple(sorted(removed)), skip)


def publish_world(client: "StoreClient", job_id: str, world: World) -> None:
    """Makes ``world`` the job's latest: its JSON under ``elastic_key(job_id,
    "world", g)``, then ``g`` under ``elastic_key(job_id, "latest")``, in
    that order (a worker that reads the latest number finds its world)."""
    client.set(names.elastic_key(job_id, "world", world.generation), world.encode())
    client.set(names.elastic_key(job_id, "latest"), str(world.generation).encode())
