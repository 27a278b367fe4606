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
import time
from collections import Counter

import pytest
from chaos_jobs import LIMIT_S, judge, print_counts, rank_pids, signal_rank
from reliability_jobs import WORKERS, finish, start_job_tagged

FAULTS = ["sigkill", "sigkill_rank0", "sigstop", "timeline_disk_full"]
NP = 3
STEPS = 400


def _one_job(rng: random.Random, fault: str) -> str:
    env = {"RING_TIMEOUT_SECONDS": "3"}
    if fault == "timeline_disk_full":
        env["RING_TIMELINE"] = "/dev/full"
    proc, tag = start_job_tagged(NP, [WORKERS / "chaos.py", str(STEPS)], env, grace=2.0)
    pids = rank_pids(proc, NP, time.monotonic() + 60)
    assert len(pids) == NP, "the job did not start"
    time.sleep(rng.uniform(0.0, 1.5))
    fault_at = time.monotonic()
    if fault != "timeline_disk_full":
        signal_rank(fault, pids, rng)
    rest = proc.stdout.read() if proc.poll() is not None else ""
    job = finish(proc, tag, timeout=LIMIT_S + 30)
    return judge(job, rest + job.output, time.monotonic() - fault_at, fault, NP)


@pytest.mark.slow
def test_chaos_run() -> None:
    jobs = int(os.environ.get("CHAOS_JOBS", "100"))
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "1")))
    counts: Counter = Counter()
    for _ in range(jobs):
        fault = rng.choice(FAULTS)
        counts[(fault, _one_job(rng, fault))] += 1
    print_counts(f"chaos run: {jobs} jobs of {NP} ranks", counts)
    assert sum(counts.values()) == jobs
