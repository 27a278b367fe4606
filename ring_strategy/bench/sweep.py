"""The size table: one row per operation and size, ring and the peers in turn."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend
from ring_strategy.bench.collectives import (
    REDOPS, bus_factor, count_wrong, element_count, expected_output, make_input,
)
from ring_strategy.bench.measure import across_ranks, interleave
from ring_strategy.bench.results import Row

__all__ = ["run_row"]


def run_row(
    backends: Sequence[Backend], op: str, nbytes: int, dtype: np.dtype,
    iters: int, warmup: int, rounds: int, check: bool,
) -> Row:
    """Measures ``op`` at ``nbytes`` with every backend; every rank must call it.

    Args:
        backends: ring first, then the peers.
        op: The collective.
        nbytes: The requested size (rounded as
            :func:`ring_strategy.bench.collectives.element_count` says).
        dtype: The element type.
        iters: Timed iterations per backend.
        warmup: Untimed iterations per backend first.
        rounds: Turns each backend takes.
        check: Whether to check one more, untimed result per backend.

    Returns:
        The row, the same on every rank.
    """
    n, me = rs.size(), rs.rank()
    count = element_count(op, nbytes, dtype.itemsize, n)
    send = make_input(op, count, dtype, me, n)
    able = [b for b in backends if b.supports(op, dtype)]
    times = interleave({b.name: b.prepare(op, send) for b in able}, iters, warmup, rounds,
                       {b.name: b.end_turn for b in able})
    wrong: Dict[str, int] = {}
    if check:
        expected = expected_output(op, count, dtype, me, n)
        for b in able:
            rs.barrier()
            wrong[b.name] = count_wrong(b.prepare(op, send)(), expected)
            b.end_turn()
    results = across_ranks([b.name for b in backends], times, wrong)
    return Row(op, count * dtype.itemsize, count, dtype.name, REDOPS[op], bus_factor(op, n), tuple(results))
