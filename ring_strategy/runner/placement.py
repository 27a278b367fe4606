"""Ranks and environments of workers placed by a cluster manager (Ray actors,
Spark tasks) rather than by ``ringrun``.

The manager tells where each worker runs; ranks are then contiguous per host,
hosts in the order in which their first worker appears (so worker 0 is rank
0), so that ``local_rank`` and ``cross_rank`` mean what they mean under
``ringrun``. Each worker gets the ``RING_*`` variables ``ringrun`` gives a
worker (:func:`ring_strategy.runner.worker_env.worker_environment`), with its
own host's local and cross rank and size.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from ring_strategy import _contracts as names
from ring_strategy.runner.worker_env import worker_environment

__all__ = ["Placement", "place", "placement_environment"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one worker sits in the job.

    Attributes:
        worker: The worker's index in the order the manager made (or listed) them.
        rank: Its rank.
        local_rank: Its rank among the workers on its host.
        local_size: The number of workers on its host.
        cross_rank: Its host's index.
        cross_size: The number of hosts.
        host_id: Its host's id (the engine's host id: equal ids share memory).
        host_address: The address peers on other hosts connect to.
    """

    worker: int
    rank: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host_id: str
    host_address: str


def place(hosts: Sequence[Tuple[str, str]]) -> List[Placement]:
    """Assigns ranks to workers from the hosts they run on.

    Args:
        hosts: ``(host id, host address)`` of each worker, in worker order.

    Returns:
        One placement per worker, ordered by rank.

    Example:
        >>> [p.worker for p in place([("a", "1"), ("b", "2"), ("a", "1")])]
        [0, 2, 1]
    """
    order: Dict[str, List[int]] = {}
    for worker, (host_id, _) in enumerate(hosts):
        order.setdefault(host_id, []).append(worker)
    placements: List[Placement] = []
    for cross_rank, (host_id, workers) in enumerate(order.items()):
        for local_rank, worker in enumerate(workers):
            placements.append(Placement(
                worker=worker, rank=len(placements), local_rank=local_rank, local_size=len(workers),
                cross_rank=cross_rank, cross_size=len(order), host_id=host_id, host_address=hosts[worker][1],
            ))
    return placements


def placement_environment(
    p: Placement, *, size: int, rendezvous_address: str, secret: bytes, job_id: str, start_timeout: float,
) -> Dict[str, str]:
    """The ``RING_*`` variables of the worker at ``p``.

    Args:
        p: The worker's placement.
        size: The number of workers.
        rendezvous_address: ``host:port`` of the driver's store.
        secret: The job secret.
        job_id: The job id.
        start_timeout: Seconds the workers may take to find each other.

    Returns:
        The variables to set in the worker.
    """
    env = worker_environment(
        {}, rank=p.rank, size=size, rendezvous_address=rendezvous_address, secret=secret,
        job_id=job_id, start_timeout=start_timeout, hostname=p.host_id,
        local_rank=p.local_rank, local_size=p.local_size, cross_rank=p.cross_rank, cross_size=p.cross_size,
    )
    if p.cross_size > 1:  # peers on other hosts connect to this host's address
        env[names.ADVERTISE_HOST] = p.host_address
    return env
