"""``python -m ring_strategy.bench``: parse, measure, print on rank 0, write files."""

from __future__ import annotations

import sys
import time
from typing import List, Optional, Sequence

import ring_strategy as rs
from ring_strategy.bench.backend import Backend
from ring_strategy.bench.cases import VARIANTS, run_small_tensors
from ring_strategy.bench.collectives import numpy_dtype
from ring_strategy.bench.membw import measure_copy_bandwidth
from ring_strategy.bench.options import Options, parse_options
from ring_strategy.bench.ours import RingBackend
from ring_strategy.bench.peers import open_peers
from ring_strategy.bench.results import Row
from ring_strategy.bench.sizes import format_size
from ring_strategy.bench.sweep import run_row
from ring_strategy.bench.table import Layout, case_lines, footer_lines, header_lines, json_rows, row_line, write_json

__all__ = ["main"]


def say(line: str) -> None:
    """Prints ``line`` on rank 0 only."""
    if rs.rank() == 0:
        print(line, flush=True)


def progress(done: int, total: int, what: str, since: float) -> None:
    """Prints ``# [done/total] what`` to stderr on rank 0 only, so that a long
    sweep shows where it is while stdout keeps only the table."""
    if rs.rank() == 0:
        print(f"# [{done}/{total}] {what} ({time.monotonic() - since:.1f} s so far)", file=sys.stderr, flush=True)


def _run_sizes(opts: Options, backends: Sequence[Backend]) -> None:
    membw = measure_copy_bandwidth() if opts.membw else None
    layout = Layout([b.name for b in backends[1:]], membw)
    for line in header_lines(layout, rs.size(), opts.dtype, opts.iters, opts.warmup, opts.rounds):
        say(line)
    if opts.device == "cuda":
        say("# tensors: torch CUDA tensors, one GPU per rank")
    rows: List[Row] = []
    dtype = numpy_dtype(opts.dtype)
    started, total = time.monotonic(), len(opts.ops) * len(opts.sizes)
    for op in opts.ops:
        say(f"# {op}")
        for nbytes in opts.sizes:
            progress(len(rows) + 1, total, f"{op} {format_size(nbytes)}", started)
            row = run_row(backends, op, nbytes, dtype, opts.iters, opts.warmup, opts.rounds, opts.check)
            rows.append(row)
            say(row_line(row, layout))
    for line in footer_lines(rows, opts.check):
        say(line)
    if rs.rank() == 0:
        _write_files(opts, rows, layout)


def _run_case(opts: Options, backends: Sequence[Backend]) -> None:
    dtype = numpy_dtype(opts.dtype)
    say(f"# ring_strategy.bench --case small-tensors: {rs.size()} rank(s), {opts.num_tensors} tensors of "
        f"{format_size(opts.tensor_bytes)} ({opts.dtype}) per step, each summed over all ranks")
    say(f"# time: median per-step time of the slowest rank, {opts.iters} timed steps ({opts.warmup} warmup) "
        f"in {opts.rounds} round(s), the variants taking turns between barriers")
    say("# algbw = bytes of all tensors / time; busbw = algbw x 2(n-1)/n; ratio = variant time / ring time "
        "(> 1: ring is faster)")
    row = run_small_tensors(backends, opts.num_tensors, opts.tensor_bytes, dtype,
                            opts.iters, opts.warmup, opts.rounds, opts.check)
    for line in case_lines(row, VARIANTS, opts.check):
        say(line)
    if rs.rank() == 0:
        _write_files(opts, [row], Layout([m.backend for m in row.peers], None))


def _write_files(opts: Options, rows: List[Row], layout: Layout) -> None:
    if opts.json is not None:
        write_json(opts.json, json_rows(rows, layout, rs.size(), opts.iters))
        say(f"# wrote {opts.json}")
    if opts.plot is not None:
        from ring_strategy.bench.plot import plot_case, plot_sizes

        title = f"ring_strategy.bench, {rs.size()} rank(s), {opts.dtype}"
        if opts.case is None:
            plot_sizes(opts.plot, rows, title, layout.mem_limit_gbps)
        else:
            plot_case(opts.plot, rows[0], f"{title}: {opts.case}")
        say(f"# wrote {opts.plot}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark; returns the exit status (0).

    Args:
        argv: The options (``sys.argv[1:]`` when None).

    Raises:
        SystemExit: With status 2 for a bad option, before joining the job.
    """
    opts = parse_options(argv)
    rs.init()
    if opts.device == "cuda":
        from ring_strategy.bench.gpu import RingCudaBackend

        ours: Backend = RingCudaBackend()
    else:
        ours = RingBackend()
    backends: List[Backend] = [ours, *open_peers(opts.compare, say)]
    try:
        if opts.case is None:
            _run_sizes(opts, backends)
        else:
            _run_case(opts, backends)
        rs.barrier()  # rank 0 has written its files before anyone leaves
    finally:
        for backend in backends:
            backend.close()
    return 0
