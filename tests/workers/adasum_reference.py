"""A plain numpy Adasum, independent of the engine, for the tests to check
against: the ranks' tensors combined as a binary tree over the ranks (the
first half of the ranks, then the second, recursively), each pair with

    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

over the whole tensor, a side with |x|^2 == 0 taking coefficient 1.
Computed in float64; with ``dtype`` each level's result is rounded to that
dtype, as the engine stores it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["adasum", "combine"]


def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pairwise adaptive sum of two tensors (float64)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    dot, aa, bb = float(np.vdot(a, b)), float(np.vdot(a, a)), float(np.vdot(b, b))
    ca = 1.0 if aa == 0 else 1.0 - dot / (2 * aa)
    cb = 1.0 if bb == 0 else 1.0 - dot / (2 * bb)
    return ca * a + cb * b


def adasum(tensors: Sequence[np.ndarray], dtype: Optional[np.dtype] = None) -> np.ndarray:
    """The Adasum of one tensor per rank (rank order; a power-of-two count)."""
    n = len(tensors)
    assert n and n & (n - 1) == 0, f"{n} ranks is not a power of two"
    if n == 1:
        return np.asarray(tensors[0], np.float64)
    out = combine(adasum(tensors[: n // 2], dtype), adasum(tensors[n // 2:], dtype))
    return out if dtype is None else out.astype(dtype).astype(np.float64)
