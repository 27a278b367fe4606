"""What the two chaos runs share (tests/reliability/test_chaos.py on one host,
tests/multihost/test_netns_chaos.py across namespace hosts): reading the
workers' pids, the faults sent to a rank's process, and how a job's end is
judged. The worker is tests/reliability/workers/chaos.py."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter
from typing import Dict

__all__ = ["LIMIT_S", "judge", "print_counts", "rank_pids", "signal_rank"]

#: A job that fails must end within this many seconds of its fault (plus 5 s of slack for ringrun).
LIMIT_S = 15.0


def rank_pids(proc, count: int, deadline: float) -> Dict[int, int]:
    """rank -> pid, read from the job's first lines (``[r] pid r P``)."""
    pids: Dict[int, int] = {}
    while len(pids) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"pid (\d+) (\d+)$", line.strip())
        if m:
            pids[int(m[1])] = int(m[2])
    return pids


def signal_rank(fault: str, pids: Dict[int, int], rng: random.Random) -> None:
    """``sigkill`` or ``sigstop`` a random rank, or ``sigkill_rank0`` rank 0."""
    victim = 0 if fault == "sigkill_rank0" else rng.randrange(len(pids))
    try:
        os.kill(pids[victim], signal.SIGSTOP if fault == "sigstop" else signal.SIGKILL)
    except ProcessLookupError:
        pass  # it had finished already


def judge(job, out: str, took: float, fault: str, count: int) -> str:
    """``completed`` (every rank's result checked) or ``ended with an error``
    (within the limit); fails the test on a wrong number, a leftover process
    or shared-memory entry, or a late end."""
    assert "wrong result" not in out, out[-3000:]
    assert job.leftover_processes == [] and job.leftover_segments == [], (job.leftover_processes,
                                                                         job.leftover_segments)
    if job.returncode == 0:
        assert out.count(": chaos ok") == count, out[-3000:]
        return "completed"
    assert took < LIMIT_S + 5, f"{fault}: ended {took:.1f} s after the fault\n{out[-3000:]}"
    return "ended with an error"


def print_counts(title: str, counts: Counter) -> None:
    """The run's counts, a line per (fault, outcome)."""
    print(f"\n{title}")
    for (fault, outcome), count in sorted(counts.items()):
        print(f"  {fault:20s} {outcome:22s} {count}")
