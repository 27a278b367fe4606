"""Generated regions of a Markdown file, and the Markdown tables that fill them.

A region is the text between ``<!-- bench:NAME begin -->`` and
``<!-- bench:NAME end -->`` (each on a line of its own). Rewriting replaces
what lies between the two markers and leaves every other byte of the file as
it was, markers included.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ring_strategy.bench.sizes import format_size
from ring_strategy.bench.table import format_time

__all__ = ["begin_marker", "end_marker", "replace_regions", "markdown_table",
           "sizes_table", "case_table", "train_table"]


def begin_marker(name: str) -> str:
    """The line that opens region ``name``."""
    return f"<!-- bench:{name} begin -->"


def end_marker(name: str) -> str:
    """The line that closes region ``name``."""
    return f"<!-- bench:{name} end -->"


def replace_regions(text: str, regions: Mapping[str, str]) -> str:
    """Returns ``text`` with each named region's content replaced.

    Args:
        text: The whole file.
        regions: Region name -> new content (a trailing newline is added
            when missing).

    Raises:
        ValueError: When a region's markers are missing, repeated or out of
            order; the message names the region and the marker.
    """
    for name, content in regions.items():
        begin, end = begin_marker(name), end_marker(name)
        for marker in (begin, end):
            count = len(re.findall(f"^{re.escape(marker)}$", text, flags=re.M))
            if count != 1:
                raise ValueError(f"region {name!r}: expected the line {marker!r} exactly once, found it {count} time(s)")
        start = re.search(f"^{re.escape(begin)}\n", text, flags=re.M)
        stop = re.search(f"^{re.escape(end)}$", text, flags=re.M)
        if start is None or stop is None or stop.start() < start.end():
            raise ValueError(f"region {name!r}: {begin!r} should be on its own line before {end!r}")
        body = content if content.endswith("\n") or not content else content + "\n"
        text = text[:start.end()] + body + text[stop.start():]
    return text


def markdown_table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A Markdown table; ``align`` holds ``l`` or ``r`` per column."""
    rule = ["---" if a == "l" else "---:" for a in align]
    return ["| " + " | ".join(cells) + " |" for cells in (header, rule, *rows)]


def _num(value: Optional[float], digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def _us(value: Optional[float]) -> str:
    return format_time(None if value is None else value / 1e6)


def sizes_table(objects: Sequence[Dict[str, Any]]) -> List[str]:
    """The size table of ``bench --json`` objects: ring, %mem when measured, then each peer."""
    by_size: Dict[int, List[Dict[str, Any]]] = {}
    for obj in objects:
        by_size.setdefault(obj["size_bytes"], []).append(obj)
    first = objects[0]
    peers = list(dict.fromkeys(o["peer"] for o in objects if o.get("peer")))
    membw = first.get("mem_limit_busbw_gbps") is not None
    header = ["size", "ring time (us)", "ring busbw (GB/s)"] + (["%mem"] if membw else [])
    for peer in peers:
        header += [f"{peer} time (us)", f"{peer} busbw (GB/s)", "ratio"]
    rows = []
    for size, group in by_size.items():
        ring = group[0]
        cells = [format_size(size), _us(ring["time_us"]), _num(ring["busbw_gbps"])]
        if membw:
            cells.append(_num(ring.get("mem_percent"), 0, "%"))
        per_peer = {o.get("peer"): o for o in group}
        for peer in peers:
            o = per_peer.get(peer, {})
            cells += [_us(o.get("peer_time_us")), _num(o.get("peer_busbw_gbps")), _num(o.get("ratio"), 2, "x")]
        rows.append(cells)
    return markdown_table(header, ["r"] * len(header), rows)


def case_table(objects: Sequence[Dict[str, Any]]) -> List[str]:
    """The variant table of ``bench --case ... --json`` objects: time per step and ratio to ring."""
    rows = [["ring", _us(objects[0]["time_us"]), "1.00x"]]
    rows += [[o["peer"], _us(o["peer_time_us"]), _num(o["ratio"], 2, "x")] for o in objects if o.get("peer")]
    return markdown_table(["variant", "time per step (us)", "ratio"], ["l", "r", "r"], rows)


def train_table(objects: Sequence[Dict[str, Any]]) -> List[str]:
    """The setup table of ``bench.train --json`` objects."""
    rows = [["np=1, no communication", _num(objects[0]["np1_samples_per_s"], 1), "-"]]
    for o in objects:
        name = "no communication" if o["framework"] == "none" else o["framework"]
        rows.append([f"np={o['ranks']}, {name}", _num(o["samples_per_s"], 1), _num(100 * o["efficiency"], 1, "%")])
    return markdown_table(["setup", "samples/s", "efficiency"], ["l", "r", "r"], rows)


def scaling_table(objects: Sequence[Dict[str, Any]]) -> List[str]:
    """``bench.scaling --json``: the configurations side by side (us per
    allreduce), then the alpha-beta fit and the model's predictions (ms)."""
    report = objects[0]
    configs = list(report["times_s"])
    rows = [[format_size(m)] + [_us(report["times_s"][c][i] * 1e6) for c in configs]
            for i, m in enumerate(report["sizes"])]
    lines = markdown_table(["size", *(f"{c} (us)" for c in configs)], ["r"] * (len(configs) + 1), rows)
    if "alpha_s" not in report:
        return lines
    errors = report["fit_errors"]
    lines += ["", f"Fit (every configuration but `auto` and `hierarchical+tree`): alpha = "
              f"{report['alpha_s'] * 1e6:.0f} us per step between hosts, beta = "
              f"{report['beta_s_per_byte'] * 1e9:.2f} ns per byte; the fitted times are "
              f"{min(errors) * 100:+.0f}% to {max(errors) * 100:+.0f}% off the measured ones.", ""]
    predictions = report["predictions"]
    algorithms = list(predictions[0]["model_s"])
    rows = [[str(p["ranks"]), format_size(p["bytes"])] + [_num(p["model_s"][a] * 1e3, 2) for a in algorithms]
            + [p["picked"]] for p in predictions]
    header = ["ranks", "size", *(f"{a} (ms)" for a in algorithms), "engine's pick"]
    return lines + markdown_table(header, ["r", "r"] + ["r"] * len(algorithms) + ["l"], rows)
