"""Printing rows the way nccl-tests does, and writing them as JSON.

A size row reads ``size count type redop | time algbw busbw #wrong``, then,
with ``--membw``, ``%mem`` (allreduce busbw as a percentage of the memory
limit), then per peer ``time busbw ratio``. Times are in microseconds,
bandwidths in GB/s (1e9 bytes per second).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ring_strategy.bench.membw import ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW, allreduce_limit_busbw
from ring_strategy.bench.results import Measurement, Row

__all__ = ["Layout", "format_time", "header_lines", "row_line", "footer_lines", "case_lines", "json_rows", "write_json"]

_LEFT = f"{'size':>12}  {'count':>12}  {'type':>8}  {'redop':>6}"
_LEFT_UNITS = f"{'(B)':>12}  {'(elements)':>12}  {'':>8}  {'':>6}"


class Layout:
    """What the size table shows besides the nccl-tests columns.

    Args:
        peers: Names of the peers, in column order.
        membw_gbps: Total copy bandwidth of the host (``--membw``), or None.
    """

    def __init__(self, peers: Sequence[str], membw_gbps: Optional[float]) -> None:
        self.peers = tuple(peers)
        self.membw_gbps = membw_gbps

    @property
    def mem_limit_gbps(self) -> Optional[float]:
        """The allreduce busbw that the memory system allows, or None."""
        return None if self.membw_gbps is None else allreduce_limit_busbw(self.membw_gbps)

    def mem_percent(self, row: Row) -> Optional[float]:
        """ring's busbw as a percentage of the memory limit (allreduce rows only)."""
        busbw, limit = row.busbw(row.ours), self.mem_limit_gbps
        if row.op != "allreduce" or busbw is None or not limit:
            return None
        return 100.0 * busbw / limit


def format_time(seconds: Optional[float]) -> str:
    """Microseconds with nccl-tests' precision: fewer decimals as times grow."""
    if seconds is None:
        return "n/a"
    us = seconds * 1e6
    return f"{us:.0f}" if us >= 10000 else f"{us:.1f}" if us >= 100 else f"{us:.2f}"


def _bw(gbps: Optional[float]) -> str:
    return "n/a" if gbps is None else f"{gbps:.2f}"


def _wrong(m: Measurement) -> str:
    if m.time_s is None:
        return "n/a"
    return "N/A" if m.wrong is None else str(m.wrong)


def header_lines(layout: Layout, ranks: int, dtype: str, iters: int, warmup: int, rounds: int) -> List[str]:
    """The comment lines above the size table."""
    lines = [
        f"# ring_strategy.bench: {ranks} rank(s), {dtype}, {iters} timed iterations ({warmup} warmup) per size, "
        f"in {rounds} round(s)",
        "# time: median per-iteration time of the slowest rank (nccl-tests prints the mean)",
        "# algbw = size / time; busbw = algbw x factor: allreduce 2(n-1)/n, allgather/alltoall/reducescatter "
        "(n-1)/n, broadcast 1",
    ]
    if layout.peers:
        lines.append("# peers run in the same processes, taking turns with ring between barriers; "
                     "ratio = ring busbw / peer busbw = peer time / ring time (> 1: ring is faster)")
    if layout.membw_gbps is not None:
        lines += [
            f"# memory: {layout.membw_gbps:.2f} GB/s total copy bandwidth (read + write, all {ranks} rank(s) "
            "copying at once)",
            f"# memory limit of an allreduce: {layout.membw_gbps:.2f} / {ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW:g} = "
            f"{layout.mem_limit_gbps:.2f} GB/s busbw (about {ALLREDUCE_MEMORY_TRAFFIC_PER_BUSBW:g} bytes of memory "
            "traffic per byte of busbw); %mem = busbw / limit",
        ]
    groups = " " * len(_LEFT) + f"  {'ring':^31}" + (" " * 7 if layout.membw_gbps is not None else "")
    names = f"{_LEFT}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}"
    units = f"{_LEFT_UNITS}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"
    if layout.membw_gbps is not None:
        names += f"  {'%mem':>5}"
        units += f"  {'':>5}"
    for peer in layout.peers:
        groups += f"  {peer:^23}"
        names += f"  {'time':>7}  {'busbw':>6}  {'ratio':>6}"
        units += f"  {'(us)':>7}  {'(GB/s)':>6}  {'':>6}"
    return lines + ["#"] + [("#" + text[1:]).rstrip() for text in (groups, names, units)]


def row_line(row: Row, layout: Layout) -> str:
    """One size row."""
    ours = row.ours
    line = (f"{row.size_bytes:>12}  {row.count:>12}  {row.dtype:>8}  {row.redop:>6}  {format_time(ours.time_s):>7}  "
            f"{_bw(row.algbw(ours)):>6}  {_bw(row.busbw(ours)):>6}  {_wrong(ours):>6}")
    if layout.membw_gbps is not None:
        percent = layout.mem_percent(row)
        line += f"  {'-' if percent is None else f'{percent:.0f}%':>5}"
    for peer in row.peers:
        ratio = row.ratio(peer)
        line += (f"  {format_time(peer.time_s):>7}  {_bw(row.busbw(peer)):>6}  "
                 f"{'n/a' if ratio is None else f'{ratio:.2f}x':>6}")
    return line


def _average_busbw(rows: Sequence[Row], index: int) -> Optional[float]:
    values = [row.busbw(row.results[index]) for row in rows]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def footer_lines(rows: Sequence[Row], checked: bool) -> List[str]:
    """Average busbw per library and, with --check, the wrong values."""
    if not rows:
        return []
    names = [m.backend for m in rows[0].results]
    averages = ", ".join(f"{name} {_bw(_average_busbw(rows, i))} GB/s" for i, name in enumerate(names))
    lines = [f"# Avg bus bandwidth: {averages}"]
    if checked:
        totals = []
        for i, name in enumerate(names):
            wrongs = [row.results[i].wrong for row in rows if row.results[i].wrong is not None]
            totals.append(f"{name} {sum(wrongs)}")
        lines.append(f"# wrong values: {', '.join(totals)}")
    return lines


def case_lines(row: Row, descriptions: Dict[str, str], checked: bool) -> List[str]:
    """A case's table: one line per variant (ring first), with its description above."""
    lines = [f"# {name}: {text}" for name, text in descriptions.items() if name in {m.backend for m in row.results}]
    lines += [
        f"#{'variant':>21}  {'time':>9}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  {'ratio':>7}",
        f"#{'':>21}  {'(us)':>9}  {'(GB/s)':>6}  {'(GB/s)':>6}",
    ]
    for i, m in enumerate(row.results):
        ratio = row.ratio(m) if i else 1.0
        wrong = _wrong(m) if checked else "N/A"
        lines.append(f"{m.backend:>22}  {format_time(m.time_s):>9}  {_bw(row.algbw(m)):>6}  {_bw(row.busbw(m)):>6}  "
                     f"{wrong:>6}  {'n/a' if ratio is None else f'{ratio:.2f}x':>7}")
    return lines


def _us(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else seconds * 1e6


def json_rows(rows: Sequence[Row], layout: Layout, ranks: int, iters: int) -> List[Dict[str, Any]]:
    """One object per row, or per row and peer when there are peers.

    Fields: op, size_bytes, count, dtype, redop, ranks, iters, time_us,
    algbw_gbps, busbw_gbps, wrong (null when not checked); with --membw
    mem_limit_busbw_gbps and mem_percent; with peers also peer, peer_time_us,
    peer_algbw_gbps, peer_busbw_gbps, peer_wrong and ratio (peer time / ring
    time). Values that could not be measured are null.
    """
    objects = []
    for row in rows:
        ours = row.ours
        base: Dict[str, Any] = {
            "op": row.op, "size_bytes": row.size_bytes, "count": row.count, "dtype": row.dtype,
            "redop": row.redop, "ranks": ranks, "iters": iters, "time_us": _us(ours.time_s),
            "algbw_gbps": row.algbw(ours), "busbw_gbps": row.busbw(ours), "wrong": ours.wrong,
        }
        if layout.membw_gbps is not None:
            base.update(mem_limit_busbw_gbps=layout.mem_limit_gbps, mem_percent=layout.mem_percent(row))
        objects += [dict(base, **_peer_fields(row, peer)) for peer in row.peers] or [base]
    return objects


def _peer_fields(row: Row, peer: Measurement) -> Dict[str, Any]:
    return {
        "peer": peer.backend, "peer_time_us": _us(peer.time_s), "peer_algbw_gbps": row.algbw(peer),
        "peer_busbw_gbps": row.busbw(peer), "peer_wrong": peer.wrong, "ratio": row.ratio(peer),
    }


def write_json(path: Path, objects: List[Dict[str, Any]]) -> None:
    """Writes ``objects`` to ``path`` as one JSON list."""
    path.write_text(json.dumps(objects, indent=1) + "\n")
