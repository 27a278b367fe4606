"""The alpha-beta cost model of the allreduce algorithms (docs/scaling.md).

An allreduce of ``M`` bytes over ``n`` ranks, ``per_host`` of them on each
host (consecutive ranks share a host, as ``ringrun`` places them), costs

    T = (steps + 2) * alpha + volume * M * beta

where ``alpha`` is the latency of one step between hosts and ``beta`` the
seconds per byte of a link between hosts (sending and reducing). Only what
crosses hosts is counted: steps and bytes inside a host are taken as free
next to the network's. The 2 extra steps are the negotiation every
collective starts with (a request to rank 0 and its answer back, across
hosts for most ranks); per algorithm (H = n / per_host hosts, c = log2 H):

====================  =============  ==========================
algorithm             steps          volume (times M)
====================  =============  ==========================
ring                  2 (n - 1)      2 (n - 1) / n
doubling              c              c
halving-doubling      2 c            2 (1 / per_host - 1 / n)
hierarchical + X      X's on H ranks X's on H ranks, of M / per_host
====================  =============  ==========================

The ring crosses hosts at every step (each step waits for its slowest
edge); the tree algorithms pair ranks at distances 1, 2, 4, ..., and only
the levels at distances of ``per_host`` and more cross hosts. The
hierarchical allreduce reduces within each host, runs X (ring, doubling or
halving-doubling) among one rank per host on ``1 / per_host`` of the
buffer, and shares the result within each host.

:func:`fit` finds ``alpha`` and ``beta`` from measured times (least squares
on relative errors); :func:`predict` extrapolates.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["FLAT", "terms", "predict", "fit", "Point"]

FLAT = ("ring", "doubling", "halving-doubling")

#: One measurement: (algorithm, ranks, ranks per host, bytes, seconds).
#: ``algorithm`` is one of FLAT, or ``hierarchical+X`` with X one of FLAT.
Point = Tuple[str, int, int, int, float]


def terms(algorithm: str, n: int, per_host: int) -> Tuple[float, float]:
    """(steps, volume factor) of ``algorithm`` for ``n`` ranks, ``per_host``
    on each host, the negotiation's two steps included; the time is
    ``steps * alpha + factor * M * beta``."""
    if n % per_host or n < 1:
        raise ValueError(f"{n} ranks do not fill hosts of {per_host}")
    hosts = n // per_host
    if algorithm.startswith("hierarchical+"):
        steps, factor = terms(algorithm.split("+", 1)[1], hosts, 1)
        return steps, factor / per_host
    if hosts == 1:
        return 0.0, 0.0
    negotiation = 2.0
    if algorithm == "ring":
        return negotiation + 2.0 * (n - 1), 2.0 * (n - 1) / n
    levels = math.log2(hosts)
    if algorithm == "doubling":
        return negotiation + levels, levels
    if algorithm == "halving-doubling":
        return negotiation + 2.0 * levels, 2.0 * (1.0 / per_host - 1.0 / n)
    raise ValueError(f"unknown algorithm {algorithm!r}")


def predict(alpha: float, beta: float, algorithm: str, n: int, per_host: int, nbytes: int) -> float:
    """The model's seconds for one allreduce of ``nbytes``."""
    steps, factor = terms(algorithm, n, per_host)
    return steps * alpha + factor * nbytes * beta


def fit(points: Sequence[Point]) -> Tuple[float, float, List[float]]:
    """``(alpha, beta, relative_errors)``: the least-squares fit of every
    point's time, each weighted by 1 / its time (so small and large messages
    count alike), and each point's (model - measured) / measured."""
    rows, ones = [], []
    for algorithm, n, per_host, nbytes, seconds in points:
        steps, factor = terms(algorithm, n, per_host)
        rows.append([steps / seconds, factor * nbytes / seconds])
        ones.append(1.0)
    (alpha, beta), *_ = np.linalg.lstsq(np.array(rows), np.array(ones), rcond=None)
    errors = [(predict(alpha, beta, a, n, p, m) - s) / s for a, n, p, m, s in points]
    return float(alpha), float(beta), errors
