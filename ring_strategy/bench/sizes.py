"""Message sizes: parsing ``4,4K,64K,1M``, geometric ranges and printing.

Suffixes are binary, as in nccl-tests: ``1K`` is 1024 bytes, ``1M`` 1024**2
and ``1G`` 1024**3. A trailing ``B`` or ``iB`` is accepted (``64KiB``).
"""

from __future__ import annotations

import re
from typing import List

__all__ = ["parse_size", "parse_size_list", "size_range", "format_size"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Returns the number of bytes written as ``text``.

    Args:
        text: A whole number with an optional K, M or G suffix, e.g. ``"64K"``.

    Returns:
        The size in bytes.

    Raises:
        ValueError: If ``text`` is not such a size; the message quotes it.

    Example:
        >>> parse_size("64K")
        65536
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(
            f"should be a number of bytes with an optional K, M or G suffix "
            f"(1K = 1024), e.g. 4K or 16M. Got: {text!r}"
        )
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_size_list(text: str) -> List[int]:
    """Parses a comma-separated list of sizes, e.g. ``"4,4K,64K,1M"``.

    Raises:
        ValueError: If an item is not a size or is 0, or the list is empty.
    """
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"should be a comma-separated list of sizes, e.g. 4,4K,1M. Got: {text!r}")
    sizes = [parse_size(item) for item in items]
    if 0 in sizes:
        raise ValueError(f"sizes should be at least 1 byte. Got: {text!r}")
    return sizes


def size_range(min_bytes: int, max_bytes: int, factor: int) -> List[int]:
    """Sizes from ``min_bytes`` to ``max_bytes``, each ``factor`` times the
    last (nccl-tests' ``-b``, ``-e`` and ``-f``).

    Raises:
        ValueError: If ``min_bytes`` is 0 or above ``max_bytes``, or
            ``factor`` is below 2.
    """
    if min_bytes < 1:
        raise ValueError(f"--min-bytes should be at least 1. Got: {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"--max-bytes should be at least --min-bytes ({min_bytes}). Got: {max_bytes}")
    if factor < 2:
        raise ValueError(f"--step-factor should be at least 2. Got: {factor}")
    sizes = [min_bytes]
    while sizes[-1] * factor <= max_bytes:
        sizes.append(sizes[-1] * factor)
    return sizes


def format_size(nbytes: int) -> str:
    """Shortest exact binary form of ``nbytes``: ``16M``, ``4K``, ``1000``."""
    for suffix in ("G", "M", "K"):
        unit = _UNITS[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)
