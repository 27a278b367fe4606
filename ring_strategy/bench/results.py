"""What one benchmark row found, for every library, and the numbers derived from it.

Units: time in seconds, bandwidths in GB/s with 1 GB = 1e9 bytes (as
nccl-tests counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["Measurement", "Row"]


@dataclass(frozen=True)
class Measurement:
    """One library's result for one row, over all ranks.

    Attributes:
        backend: The library's name (``ring``, ``gloo``, ``gloo-coalesced``, ...).
        time_s: Median per-iteration time of the slowest rank, in seconds;
            None when the library cannot run the row.
        wrong: Wrong result elements summed over all ranks; None when results
            were not checked.
    """

    backend: str
    time_s: Optional[float]
    wrong: Optional[int]


@dataclass(frozen=True)
class Row:
    """One size of one operation (or one case), ring first, then the peers.

    Attributes:
        op: ``allreduce``, ... or a case name such as ``small-tensors``.
        size_bytes: The row's size (see :mod:`ring_strategy.bench.collectives`).
        count: Elements in ``size_bytes``.
        dtype: The dtype's name.
        redop: ``sum`` or ``none``.
        factor: busbw / algbw for this op and world size.
        results: ring's measurement, then one per peer.
    """

    op: str
    size_bytes: int
    count: int
    dtype: str
    redop: str
    factor: float
    results: Tuple[Measurement, ...]

    @property
    def ours(self) -> Measurement:
        """ring's measurement."""
        return self.results[0]

    @property
    def peers(self) -> Tuple[Measurement, ...]:
        """The peers' measurements, in --compare order."""
        return self.results[1:]

    def algbw(self, m: Measurement) -> Optional[float]:
        """size / time in GB/s, or None without a time."""
        if m.time_s is None or m.time_s <= 0:
            return None
        return self.size_bytes / m.time_s / 1e9

    def busbw(self, m: Measurement) -> Optional[float]:
        """algbw × the op's factor in GB/s, or None without a time."""
        algbw = self.algbw(m)
        return None if algbw is None else algbw * self.factor

    def ratio(self, peer: Measurement) -> Optional[float]:
        """ring's speed over the peer's: peer time / ring time (> 1: ring is
        faster; equal to the ratio of the busbw columns)."""
        if peer.time_s is None or self.ours.time_s is None or self.ours.time_s <= 0:
            return None
        return peer.time_s / self.ours.time_s
