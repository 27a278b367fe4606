"""Draws a timeline as a picture: one row per tensor, a bar per phase.

Outer phases (NEGOTIATE_*, ALLREDUCE, ...) are full-height bars; phases
nested in them (PRESCALE, RING_ALLREDUCE, ...) are drawn
inside as thinner bars; each rank's readiness is a tick labelled with the
rank under the negotiation bar. The time axis is in milliseconds since the
trace's first event; the legend stands to the right of the plot, clear of
the bars.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

__all__ = ["figure", "render"]

_COLORS = {
    "NEGOTIATE": "#c9c9c9",
    "PRESCALE": "#f2b134",
    "MEMCPY_IN_FUSION_BUFFER": "#f2b134",
    "MEMCPY_OUT_FUSION_BUFFER": "#ef8a17",
    "RING": "#2f7ed8",
    "CHAIN": "#2f7ed8",
    "PAIRWISE": "#2f7ed8",
    "DISSEMINATION": "#2f7ed8",
    "NCCL": "#2f7ed8",
    "DOUBLING": "#2f7ed8",
    "HALVING": "#2f7ed8",
}


def _color(phase: str) -> str:
    for prefix, color in _COLORS.items():
        if phase.startswith(prefix):
            return color
    return "#7fbf7b"  # the operation itself (ALLREDUCE, ...)


def _ticks(events: List[dict]) -> Dict[int, List[Tuple[float, str]]]:
    ticks: Dict[int, List[Tuple[float, str]]] = {}
    for e in events:
        if e.get("ph") == "i" and e.get("s") != "g":  # a rank's readiness (not a cycle mark)
            ticks.setdefault(e["pid"], []).append((e["ts"], e["name"]))
    return ticks


def _origin(events: List[dict]) -> float:
    """The trace's first timestamp (µs), 0 for a trace without one."""
    return min((e["ts"] for e in events if "ts" in e), default=0.0)


def _legend(ax: Any) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=label) for label, c in [
        ("NEGOTIATE_<OP>\n(ticks: ranks ready)", _COLORS["NEGOTIATE"]), ("<OP> on rank 0", "#7fbf7b"),
        ("PRESCALE", _COLORS["PRESCALE"]),
        ("the collective\n(RING_ALLREDUCE,\nNCCL_ALLREDUCE, ...)", _COLORS["RING"])]]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)


def figure(events: List[dict], max_rows: int = 24) -> Any:
    """The picture of the first ``max_rows`` tensors' phases, as a matplotlib figure.

    Args:
        events: The trace's events (:func:`ring_strategy.timeline.load`).
        max_rows: Tensors to draw, in the order they first appear.

    Returns:
        The figure (the caller closes it); its x axis is in ms since the first event.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ring_strategy.timeline.trace import phases

    spans = phases(events)
    names = list(spans)[:max_rows]
    pids = {e["args"]["name"]: e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    ticks = _ticks(events)
    t0 = _origin(events)
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(names) + 1.5))
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        for phase, start, end in spans[name]:
            inner = not (phase.startswith("NEGOTIATE") or phase.isalpha())
            height = 0.4 if inner else 0.8
            ax.barh(y, max(end - start, 1.0) / 1e3, left=(start - t0) / 1e3, height=height, color=_color(phase),
                    edgecolor="black", linewidth=0.3)
        for ts, rank in ticks.get(pids.get(name, -1), []):
            ms = (ts - t0) / 1e3
            ax.plot([ms, ms], [y - 0.4, y + 0.4], color="black", linewidth=0.8)
            ax.text(ms, y - 0.45, rank, fontsize=6, ha="center", va="top")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)), fontsize=8)
    ax.set_xlabel("time since the start of the trace (ms)")
    ax.set_xlim(left=0)
    _legend(ax)
    fig.tight_layout()
    return fig


def render(events: List[dict], out_path: str, max_rows: int = 24) -> None:
    """Writes a PNG of :func:`figure` to ``out_path``."""
    import matplotlib.pyplot as plt

    fig = figure(events, max_rows)
    fig.savefig(out_path, dpi=110, bbox_inches="tight")
    plt.close(fig)
