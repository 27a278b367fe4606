"""Memory bandwidth of this host, measured in the same run (``--membw``).

Every rank copies a large numpy array (``np.copyto``) at the same time as the
others; the memory traffic of a copy is counted as read + write, twice the
array's size. The result is the total over all ranks: bytes moved by every
rank together divided by the slowest rank's time, best of a few trials.

On a host whose ranks share one memory system this total is the ceiling of
everything that moves data through memory, the allreduce included. The
*memory limit* of a row is the busbw the allreduce would reach if it were
limited by that traffic alone:

    limit_busbw = total_membw / ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW

with ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW = 3, this project's model for a
2-rank allreduce over shared memory: about 3 bytes of memory traffic (all
ranks together) per byte of busbw. For example, a host whose two cores copy
18 GB/s in total limits a 2-rank 64 MiB allreduce to about 6 GB/s busbw.
The model is a guide, not a bound: how many bytes really reach memory depends
on the algorithm and on what stays in the caches, so the percentage can
exceed 100. It is printed for allreduce rows only.
"""

from __future__ import annotations

import time

import numpy as np

import ring_strategy as rs

__all__ = [
    "ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW", "DEFAULT_COPY_BYTES", "measure_copy_bandwidth",
    "allreduce_limit_busbw",
]

#: Bytes of memory traffic (reads + writes, all ranks of the host together)
#: per byte of busbw of a 2-rank allreduce over shared memory; see the module
#: docstring.
ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW = 3.0
#: Size of the array each rank copies: well beyond any cache.
DEFAULT_COPY_BYTES = 64 << 20
_COPIES_PER_TRIAL = 6
_TRIALS = 3


def measure_copy_bandwidth(nbytes: int = DEFAULT_COPY_BYTES) -> float:
    """Total copy bandwidth of all ranks copying at once, in GB/s (1e9 B/s).

    Every rank must call this; each returns the same value.

    Args:
        nbytes: Bytes of the array each rank copies.
    """
    src = np.ones(max(1, nbytes // 8), np.float64)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # touches every page before the clock starts
    best = 0.0
    for _ in range(_TRIALS):
        rs.barrier()
        start = time.perf_counter()
        for _ in range(_COPIES_PER_TRIAL):
            np.copyto(dst, src)
        elapsed = time.perf_counter() - start
        slowest = float(rs.allreduce(np.array([elapsed]), op=rs.Max, name="bench.membw.time")[0])
        moved = 2 * src.nbytes * _COPIES_PER_TRIAL * rs.size()
        best = max(best, moved / slowest / 1e9)
    return best


def allreduce_limit_busbw(total_membw_gbps: float) -> float:
    """The busbw (GB/s) at which an allreduce would be limited by memory."""
    return total_membw_gbps / ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW
