"""The libraries ring is compared with (``--compare``), opened by name."""

from __future__ import annotations

from typing import Callable, List, Sequence

from ring_strategy.bench.backend import Backend

__all__ = ["PEERS", "open_peers"]

PEERS = ("gloo", "mpi")


def open_peers(names: Sequence[str], log: Callable[[str], None]) -> List[Backend]:
    """Starts the named peers in this process; every rank must call it.

    Args:
        names: Peer names from :data:`PEERS`.
        log: Prints a line (on rank 0) for each peer that cannot run here,
            with the reason; the benchmark goes on without it.

    Returns:
        The peers that could be started, in the order given.
    """
    peers: List[Backend] = []
    for name in names:
        if name == "gloo":
            from ring_strategy.bench.gloo import GlooBackend

            peers.append(GlooBackend())
        elif name == "mpi":
            from ring_strategy.bench.mpi import open_mpi

            peer, reason = open_mpi()
            if peer is None:
                log(f"# --compare mpi: {reason}")
            else:
                peers.append(peer)
        else:
            raise ValueError(f"--compare should name peers among {', '.join(PEERS)}. Got: {name!r}")
    return peers
