"""The libraries ring is compared with (``--compare``), opened by name."""

from __future__ import annotations

import importlib.util
from typing import Callable, List, Sequence

import ring_strategy as rs
from ring_strategy.bench.backend import Backend

__all__ = ["CPU_PEERS", "PEERS", "open_peers"]

CPU_PEERS = ("gloo", "mpi")
#: Every peer; ``nccl`` and ``torch-nccl`` run with ``--device cuda`` only (bench/gpu.py).
PEERS = CPU_PEERS + ("nccl", "torch-nccl")


def _gloo_unavailable() -> str:
    """Why the gloo peer cannot run here, or "" when it can (same on every rank)."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install 'ring-strategy[torch]'); skipping the gloo peer"
    try:
        import torch.distributed as dist
    except ImportError as e:
        return f"torch.distributed cannot be imported ({e}); skipping the gloo peer"
    if not dist.is_available():
        return "this torch is built without torch.distributed; skipping the gloo peer"
    if rs.local_size() != rs.size():
        return "the ranks span several hosts and the gloo peer meets on loopback; skipping the gloo peer"
    return ""


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
            reason = _gloo_unavailable()
            if reason:
                log(f"# --compare gloo: {reason}")
                continue
            from ring_strategy.bench.gloo import GlooBackend

            peers.append(GlooBackend())
        elif name == "mpi":
            from ring_strategy.bench.mpi import open_mpi

            peer, reason = open_mpi()
            if peer is None:
                log(f"# --compare mpi: {reason}")
            else:
                peers.append(peer)
        elif name in ("nccl", "torch-nccl"):
            from ring_strategy.bench.gpu import open_gpu_peer

            peers.append(open_gpu_peer(name))
        else:
            raise ValueError(f"--compare should name peers among {', '.join(PEERS)}. Got: {name!r}")
    return peers
