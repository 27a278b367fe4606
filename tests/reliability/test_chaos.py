"""The chaos run (slow; ``make chaos-test``, or ``pytest -m slow -s
tests/reliability/test_chaos.py``; CHAOS_JOBS sets the count, 100 by
default): jobs of 3 ranks, each with one random fault at a random moment:
SIGKILL of a rank, SIGKILL of rank 0, SIGSTOP of a rank, or a timeline file
on a full disk (/dev/full). Every job must either complete with correct
results on every rank or end with a ring error within 15 s of the fault;
never hang, never give a wrong number, never leave a process or a /dev/shm
entry behind. The counts are printed."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter

import pytest
from reliability_jobs import WORKERS, finish, start_job_tagged

FAULTS = ["sigkill", "sigkill_rank0", "sigstop", "timeline_disk_full"]
NP = 3
STEPS = 400
LIMIT_S = 15.0


def _pids(proc, deadline: float) -> dict:
    """rank -> pid, read from the job's first lines (``[r] pid r P``)."""
    pids: dict = {}
    while len(pids) < NP and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"pid (\d+) (\d+)$", line.strip())
        if m:
            pids[int(m[1])] = int(m[2])
    return pids


def _one_job(rng: random.Random, fault: str) -> str:
    env = {"RING_TIMEOUT_SECONDS": "3"}
    if fault == "timeline_disk_full":
        env["RING_TIMELINE"] = "/dev/full"
    proc, tag = start_job_tagged(NP, [WORKERS / "chaos.py", str(STEPS)], env, grace=2.0)
    pids = _pids(proc, time.monotonic() + 60)
    assert len(pids) == NP, "the job did not start"
    time.sleep(rng.uniform(0.0, 1.5))
    fault_at = time.monotonic()
    if fault != "timeline_disk_full":
        victim = 0 if fault == "sigkill_rank0" else rng.randrange(NP)
        try:
            os.kill(pids[victim], signal.SIGSTOP if fault == "sigstop" else signal.SIGKILL)
        except ProcessLookupError:
            pass  # it had finished already
    rest = proc.stdout.read() if proc.poll() is not None else ""
    job = finish(proc, tag, timeout=LIMIT_S + 30)
    took = time.monotonic() - fault_at
    out = rest + job.output
    assert "wrong result" not in out, out[-3000:]
    assert job.leftover_processes == [] and job.leftover_segments == [], (job.leftover_processes,
                                                                         job.leftover_segments)
    if job.returncode == 0:
        assert out.count(": chaos ok") == NP, out[-3000:]
        return "completed"
    assert took < LIMIT_S + 5, f"{fault}: ended {took:.1f} s after the fault\n{out[-3000:]}"
    return "ended with an error"


@pytest.mark.slow
def test_chaos_run() -> None:
    jobs = int(os.environ.get("CHAOS_JOBS", "100"))
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "1")))
    counts: Counter = Counter()
    for _ in range(jobs):
        fault = rng.choice(FAULTS)
        counts[(fault, _one_job(rng, fault))] += 1
    print(f"\nchaos run: {jobs} jobs of {NP} ranks")
    for (fault, outcome), count in sorted(counts.items()):
        print(f"  {fault:20s} {outcome:22s} {count}")
    assert sum(counts.values()) == jobs
