"""Batch normalization over every rank's batch: the statistics rule every
front end's synchronized batch norm follows, written once.

Each rank packs its per-channel sums into one vector, ``[sum(x) (C values),
sum(x*x) (C values), count]``, the vector is Sum-allreduced, and the global
mean and biased variance come out of the summed vector. Ranks may hold
batches of different sizes: the count weighs each rank's share. The sums
should be float64 (``E[x^2] - E[x]^2`` loses digits in float32).

The functions use only slicing and arithmetic, so they work on numpy
arrays, torch tensors and tf tensors alike; nothing here imports a framework.
"""

from __future__ import annotations

from typing import Any, Tuple


def packed_length(channels: int) -> int:
    """Length of the packed vector for ``channels`` channels."""
    return 2 * channels + 1


def global_moments(summed: Any, channels: int) -> Tuple[Any, Any, Any]:
    """``(mean, variance, count)`` per channel from the allreduced packed vector.

    Args:
        summed: ``[sum(x), sum(x*x), count]`` summed over the ranks, as
            :func:`packed_length` describes.
        channels: the number of channels C.

    Returns:
        The mean (C values), the biased variance ``E[x^2] - E[x]^2`` (C
        values, may be slightly negative through rounding: clamp it at 0)
        and the global count (a 1-element slice).
    """
    count = summed[2 * channels:]
    mean = summed[:channels] / count
    variance = summed[channels:2 * channels] / count - mean * mean
    return mean, variance, count
