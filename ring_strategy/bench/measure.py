"""Timing: warmup, interleaved rounds with barriers, medians across ranks.

Every library is timed call by call with ``time.perf_counter``; the reported
time is the median of the per-call times (nccl-tests prints the mean of a
batch), taken on every rank, and then the largest of the ranks' medians: a
collective is as fast as its slowest rank.

To keep the comparison fair on a busy machine, a row's iterations are split
into rounds, and within a round ring and each peer take turns, separated by
ring's process-wide barrier: ring, peer, ring, peer, ...
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.results import Measurement

__all__ = ["time_calls", "chunks", "interleave", "across_ranks"]


def time_calls(call: Callable[[], object], iters: int) -> List[float]:
    """Seconds taken by each of ``iters`` calls of ``call``."""
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def chunks(iters: int, rounds: int) -> List[int]:
    """``iters`` split into at most ``rounds`` near-equal, non-empty parts."""
    rounds = max(1, min(rounds, iters))
    return [iters // rounds + (1 if i < iters % rounds else 0) for i in range(rounds)]


def interleave(
    calls: Mapping[str, Callable[[], object]], iters: int, warmup: int, rounds: int,
    end_turn: Optional[Mapping[str, Callable[[], None]]] = None,
) -> Dict[str, List[float]]:
    """Times every call ``iters`` times, taking turns in rounds.

    Every rank must pass calls with the same names in the same order.

    Args:
        calls: Library name to the call to time.
        iters: Timed calls per library.
        warmup: Untimed calls per library before the first round.
        rounds: Number of turns each library gets.
        end_turn: Library name to what ends its turn inside that library
            (:meth:`Backend.end_turn <ring_strategy.bench.backend.Backend.end_turn>`),
            run after each of its turns, before ring's barrier.

    Returns:
        Library name to its per-call times in seconds, on this rank.
    """
    end_turn = end_turn or {}
    for name, call in calls.items():
        rs.barrier()
        time_calls(call, warmup)
        end_turn.get(name, _nothing)()
    times: Dict[str, List[float]] = {name: [] for name in calls}
    for part in chunks(iters, rounds):
        for name, call in calls.items():
            rs.barrier()
            times[name] += time_calls(call, part)
            end_turn.get(name, _nothing)()
    return times


def _nothing() -> None:
    return None


def across_ranks(
    names: Sequence[str], times: Mapping[str, List[float]], wrong: Mapping[str, int],
) -> List[Measurement]:
    """Combines every rank's results into one measurement per library.

    Every rank must call this with the same ``names``.

    Args:
        names: Every library of the row, in order; a name missing from
            ``times`` could not run the row.
        times: Per-call times on this rank.
        wrong: Wrong elements on this rank, for libraries whose results were
            checked.

    Returns:
        One :class:`Measurement` per name: the slowest rank's median time and
        the wrong elements summed over ranks.
    """
    mine = []
    for name in names:
        mine.append(statistics.median(times[name]) if times.get(name) else math.nan)
        mine.append(float(wrong[name]) if name in wrong else math.nan)
    everyone = rs.allgather(np.array(mine, np.float64), name="bench.results").reshape(rs.size(), -1)
    return [_combine(name, everyone[:, 2 * i], everyone[:, 2 * i + 1]) for i, name in enumerate(names)]


def _combine(name: str, medians: np.ndarray, wrongs: np.ndarray) -> Measurement:
    time_s: Optional[float] = None if np.isnan(medians).any() else float(medians.max())
    wrong: Optional[int] = None if np.isnan(wrongs).any() else int(wrongs.sum())
    return Measurement(name, time_s, wrong)
