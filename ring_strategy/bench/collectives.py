"""What each benchmarked collective moves, and what it must return.

Sizes follow nccl-tests: the ``size`` of a row is the largest buffer of the
operation on one rank, so ``algbw = size / time`` means the same thing here as
there:

============== ==================== ===================== ===============
op             input per rank       output per rank       busbw factor
============== ==================== ===================== ===============
allreduce      count                count                 2(n-1)/n
allgather      count / n            count                 (n-1)/n
broadcast      count (root 0)       count                 1
alltoall       count                count                 (n-1)/n
reducescatter  count                count / n             (n-1)/n
============== ==================== ===================== ===============

For the last four, ``count`` is rounded down to a multiple of ``n`` (at least
``n``), so the printed size can be a little below the one asked for.

Inputs are small whole numbers, so every result, in every dtype (float16 and
bfloat16 included) and for up to a few dozen ranks, is exact and can be
compared with ``==``.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

__all__ = [
    "OPS", "DTYPES", "REDOPS", "numpy_dtype", "element_count", "bus_factor",
    "make_input", "expected_output", "count_wrong",
]

OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
# The reduction each op uses, as nccl-tests prints it in the redop column.
REDOPS: Dict[str, str] = {
    "allreduce": "sum", "allgather": "none", "broadcast": "none", "alltoall": "none", "reducescatter": "sum",
}
_SPLIT_OPS = ("allgather", "alltoall", "reducescatter")
# Input values are (3 * index + rank) % _MODULUS: small, so sums stay exact.
_MODULUS = 11


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype called ``name`` (``bfloat16`` comes from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def element_count(op: str, nbytes: int, itemsize: int, n: int) -> int:
    """Elements of the row's buffer (the ``count`` column) for a size in bytes."""
    count = max(1, nbytes // itemsize)
    if op in _SPLIT_OPS:
        count = max(n, count // n * n)
    return count


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests' factors)."""
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def _periodic(period_values: np.ndarray, start: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` elements of the infinite repetition of ``period_values``,
    from index ``start``, built without large temporaries."""
    first = np.roll(period_values, -(start % _MODULUS)).astype(np.float32).astype(dtype)
    return np.resize(first, count)


def _pattern(start: int, count: int, rank: int, dtype: np.dtype) -> np.ndarray:
    """Elements ``start`` to ``start + count`` of rank ``rank``'s input."""
    # (3 * index + rank) % _MODULUS repeats every _MODULUS indices.
    return _periodic((np.arange(_MODULUS) * 3 + rank) % _MODULUS, start, count, dtype)


def _rank_sum(start: int, count: int, n: int, dtype: np.dtype) -> np.ndarray:
    """The same elements summed over ranks 0 to n - 1."""
    total = sum((np.arange(_MODULUS) * 3 + r) % _MODULUS for r in range(n))
    return _periodic(np.asarray(total), start, count, dtype)


def make_input(op: str, count: int, dtype: np.dtype, rank: int, n: int) -> np.ndarray:
    """This rank's input buffer for one row (see the module table)."""
    if op == "allgather":
        return _pattern(rank * (count // n), count // n, rank, dtype)
    return _pattern(0, count, rank, dtype)


def expected_output(op: str, count: int, dtype: np.dtype, rank: int, n: int) -> np.ndarray:
    """What ``op`` must return on ``rank`` for the inputs of :func:`make_input`."""
    block = count // n
    if op == "allreduce":
        return _rank_sum(0, count, n, dtype)
    if op == "broadcast":
        return _pattern(0, count, 0, dtype)
    if op == "allgather":
        return np.concatenate([_pattern(r * block, block, r, dtype) for r in range(n)])
    if op == "alltoall":
        return np.concatenate([_pattern(rank * block, block, r, dtype) for r in range(n)])
    if op == "reducescatter":
        return _rank_sum(rank * block, block, n, dtype)
    raise ValueError(f"op should be one of {', '.join(OPS)}. Got: {op!r}")


def count_wrong(output: Any, expected: np.ndarray) -> int:
    """Elements of ``output`` (numpy, or a torch or cupy GPU array: copied to
    the host) that differ from ``expected`` (all of them when the shapes
    differ)."""
    if hasattr(output, "get") and not isinstance(output, np.ndarray):  # cupy
        output = output.get()
    elif hasattr(output, "cpu"):  # torch
        from ring_strategy.bench.gloo import to_numpy

        output = to_numpy(output.cpu(), expected.dtype)
    output = np.asarray(output).reshape(-1)
    if output.shape != expected.shape:
        return int(max(output.size, expected.size))
    return int(np.count_nonzero(output != expected))
