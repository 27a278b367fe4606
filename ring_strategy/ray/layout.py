"""Ranks and environments of the Ray actors of one job.

Ranks are contiguous per node, nodes in the order in which their first actor
appears, so that ``local_rank`` and ``cross_rank`` mean what they mean under
``ringrun``. Each actor gets the ``RING_*`` variables ``ringrun`` gives a
worker (:func:`ring_strategy.runner.worker_env.worker_environment`), with its own
node's local and cross rank and size.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from ring_strategy import _contracts as names
from ring_strategy.runner.worker_env import worker_environment

__all__ = ["Placement", "place", "placement_environment"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one actor sits in the job.

    Attributes:
        actor: The actor's index in the order the executor made them.
        rank: Its rank.
        local_rank: Its rank among the actors on its node.
        local_size: The number of actors on its node.
        cross_rank: Its node's index.
        cross_size: The number of nodes.
        node_id: Its Ray node id (the engine's host id).
        node_ip: Its node's IP address.
    """

    actor: int
    rank: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    node_id: str
    node_ip: str


def place(nodes: Sequence[Tuple[str, str]]) -> List[Placement]:
    """Assigns ranks to actors from the nodes they run on.

    Args:
        nodes: ``(node id, node IP)`` of each actor, in actor order.

    Returns:
        One placement per actor, ordered by rank.

    Example:
        >>> [p.actor for p in place([("a", "1"), ("b", "2"), ("a", "1")])]
        [0, 2, 1]
    """
    order: Dict[str, List[int]] = {}
    for actor, (node_id, _) in enumerate(nodes):
        order.setdefault(node_id, []).append(actor)
    placements: List[Placement] = []
    for cross_rank, (node_id, actors) in enumerate(order.items()):
        for local_rank, actor in enumerate(actors):
            placements.append(Placement(
                actor=actor, rank=len(placements), local_rank=local_rank, local_size=len(actors),
                cross_rank=cross_rank, cross_size=len(order), node_id=node_id, node_ip=nodes[actor][1],
            ))
    return placements


def placement_environment(
    p: Placement, *, size: int, rendezvous_address: str, secret: bytes, job_id: str, start_timeout: float,
) -> Dict[str, str]:
    """The ``RING_*`` variables of the actor at ``p``.

    Args:
        p: The actor's placement.
        size: The number of actors.
        rendezvous_address: ``host:port`` of the driver's store.
        secret: The job secret.
        job_id: The job id.
        start_timeout: Seconds the actors may take to find each other.

    Returns:
        The variables to set in the actor.
    """
    env = worker_environment(
        {}, rank=p.rank, size=size, rendezvous_address=rendezvous_address, secret=secret,
        job_id=job_id, start_timeout=start_timeout, hostname=p.node_id,
        local_rank=p.local_rank, local_size=p.local_size, cross_rank=p.cross_rank, cross_size=p.cross_size,
    )
    if p.cross_size > 1:  # peers on other nodes connect to this node's Ray address
        env[names.ADVERTISE_HOST] = p.node_ip
    return env
