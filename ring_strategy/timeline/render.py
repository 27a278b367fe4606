"""Draws a timeline as a picture: one row per tensor, a bar per phase.

Outer phases (NEGOTIATE_*, ALLREDUCE, ...) are full-height bars; phases
nested in them (MEMCPY_IN_FUSION_BUFFER, RING_ALLREDUCE, ...) are drawn
inside as thinner bars; each rank's readiness is a tick labelled with the
rank under the negotiation bar.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

__all__ = ["render"]

_COLORS = {
    "NEGOTIATE": "#c9c9c9",
    "MEMCPY_IN_FUSION_BUFFER": "#f2b134",
    "MEMCPY_OUT_FUSION_BUFFER": "#ef8a17",
    "RING": "#2f7ed8",
    "CHAIN": "#2f7ed8",
    "PAIRWISE": "#2f7ed8",
    "DISSEMINATION": "#2f7ed8",
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


def render(events: List[dict], out_path: str, max_rows: int = 24) -> None:
    """Writes a PNG of the first ``max_rows`` tensors' phases to ``out_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ring_strategy.timeline.trace import phases

    spans = phases(events)
    names = list(spans)[:max_rows]
    pids = {e["args"]["name"]: e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    ticks = _ticks(events)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(names) + 1.5))
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        for phase, start, end in spans[name]:
            inner = not (phase.startswith("NEGOTIATE") or phase.isalpha())
            height = 0.4 if inner else 0.8
            ax.barh(y, max(end - start, 1.0), left=start, height=height, color=_color(phase), edgecolor="black",
                    linewidth=0.3)
        for ts, rank in ticks.get(pids.get(name, -1), []):
            ax.plot([ts, ts], [y - 0.4, y + 0.4], color="black", linewidth=0.8)
            ax.text(ts, y - 0.45, rank, fontsize=6, ha="center", va="top")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)), fontsize=8)
    ax.set_xlabel("time since the timeline started (µs)")
    legend = [Patch(color=c, label=label) for label, c in [
        ("NEGOTIATE_<OP> (ticks: ranks ready)", _COLORS["NEGOTIATE"]), ("<OP> on rank 0", "#7fbf7b"),
        ("MEMCPY_IN_FUSION_BUFFER", _COLORS["MEMCPY_IN_FUSION_BUFFER"]), ("the collective (RING_ALLREDUCE, ...)",
                                                                        _COLORS["RING"]),
        ("MEMCPY_OUT_FUSION_BUFFER", _COLORS["MEMCPY_OUT_FUSION_BUFFER"])]]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
