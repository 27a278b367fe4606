"""One rank of the soak job: ``python soak_worker.py STEPS TENSORS [TAG]``.

Every step allreduces TENSORS gradients of mixed sizes (asynchronously, as
a training step does), then waits for all of them; every 100th step checks
every result. Memory (RSS from /proc/self/statm), open file descriptors and
the job's shared-memory entries are measured after the warm-up (a tenth of
the steps, at least 100) and at the end, and printed as one JSON line:
``soak {"rank": ..., "rss_warm": ..., ...}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

import ring_strategy as rs

PAGE = os.sysconf("SC_PAGE_SIZE")


def sizes(count: int) -> List[int]:
    """Element counts of the gradients: mostly small, every 20th large."""
    return [65536 if i % 20 == 19 else (i * 37) % 1000 + 1 for i in range(count)]


def measure() -> Dict[str, int]:
    """RSS in bytes, open file descriptors, this job's /dev/shm entries."""
    rss_pages = int(Path("/proc/self/statm").read_text().split()[1])
    job = os.environ.get("RING_JOB_ID", "")
    return {
        "rss": rss_pages * PAGE,
        "fds": len(os.listdir("/proc/self/fd")),
        "shm": len(list(Path("/dev/shm").glob(f"ring.{job}*"))) if job else -1,
    }


def step(grads: List[np.ndarray], check: bool) -> None:
    """One training step's allreduces; every result checked when ``check``."""
    n = rs.size()
    handles = [rs.allreduce_async(g, op=rs.Sum, name=f"soak.grad.{i}") for i, g in enumerate(grads)]
    for i, h in enumerate(handles):
        got = rs.synchronize(h)
        if check:
            want = grads[i] * n + n * (n - 1) / 2 - rs.rank() * n
            assert np.array_equal(got, want), (i, got[:4], want[:4])


def main() -> None:
    steps, tensors = int(sys.argv[1]), int(sys.argv[2])
    warmup = max(100, steps // 10)
    rs.init()
    grads = [np.arange(s, dtype=np.float32) % 97 + rs.rank() for s in sizes(tensors)]
    figures: Dict[str, float] = {"rank": rs.rank(), "steps": steps, "tensors": tensors, "warmup": warmup}
    start = time.monotonic()
    for s in range(steps):
        step(grads, check=s % 100 == 0)
        if s + 1 == warmup:
            figures.update({f"{k}_warm": v for k, v in measure().items()})
            warm_at = time.monotonic()
    figures.update({f"{k}_end": v for k, v in measure().items()})
    figures["seconds"] = round(time.monotonic() - start, 1)
    figures["steps_per_second"] = round((steps - warmup) / max(1e-9, time.monotonic() - warm_at), 1)
    rs.barrier()
    print("soak " + json.dumps(figures), flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
