"""``--plot``: busbw against size, both on log scales, ring and the peers (matplotlib).

Bandwidth spans several decades between 4 bytes and 64 MiB, so the busbw axis
is logarithmic too: on a linear one the small sizes would lie flat on zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Sequence

from ring_strategy.bench.results import Row
from ring_strategy.bench.sizes import format_size

__all__ = ["plot_sizes", "plot_case", "sizes_figure"]

# One color per op; ring draws solid lines with circles, each peer its own style.
_LINES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "v")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def _ops(rows: Sequence[Row]) -> List[str]:
    return list(dict.fromkeys(row.op for row in rows))


def sizes_figure(rows: Sequence[Row], title: str, mem_limit_gbps: Optional[float] = None) -> Any:
    """The figure :func:`plot_sizes` saves: busbw (GB/s, log scale) against size (bytes, log scale).

    Args:
        rows: Size rows, every one with the same libraries.
        title: The figure's title.
        mem_limit_gbps: The allreduce memory limit, drawn as a dotted line.

    Returns:
        The matplotlib figure (the caller closes it).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    sizes = sorted({row.size_bytes for row in rows})
    for color, op in enumerate(_ops(rows)):
        op_rows = [row for row in rows if row.op == op]
        for i, m in enumerate(op_rows[0].results):
            points = [(row.size_bytes, row.busbw(row.results[i])) for row in op_rows]
            points = [(x, y) for x, y in points if y is not None and y > 0]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, color=f"C{color}", marker=_MARKERS[i % len(_MARKERS)],
                        linestyle=_LINES[i % len(_LINES)], label=f"{op}, {m.backend}")
    if mem_limit_gbps and "allreduce" in _ops(rows):
        ax.axhline(mem_limit_gbps, color="gray", linestyle=(0, (1, 3)), label="allreduce memory limit")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [format_size(s) for s in sizes])
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_sizes(path: Path, rows: Sequence[Row], title: str, mem_limit_gbps: Optional[float] = None) -> None:
    """Saves :func:`sizes_figure` to ``path``; matplotlib picks the format from its suffix."""
    fig = sizes_figure(rows, title, mem_limit_gbps)
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)


def plot_case(path: Path, row: Row, title: str) -> None:
    """Draws one bar per variant of a case: its time per step in microseconds."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    measured = [m for m in row.results if m.time_s is not None]
    ax.barh([m.backend for m in measured], [m.time_s * 1e6 for m in measured])
    ax.invert_yaxis()  # ring on top
    ax.set_xlabel("time per step (us, lower is better)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
