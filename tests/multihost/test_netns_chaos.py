"""The chaos run across namespace hosts (slow; ``make chaos-test``, or
``pytest -m slow -s tests/multihost/test_netns_chaos.py``; CHAOS_JOBS sets the
count, 100 by default): jobs of 3 ranks, two on host 0 (shared memory) and
one on host 1 (TCP over the relay link of relay.py), each with one random
fault at a random moment: SIGKILL of a rank, SIGKILL of rank 0, SIGSTOP of a
rank, the link down, 10% loss on the link, or the timeline file on a full
disk (/dev/full). Every job must either complete with correct results on
every rank or end with a ring error within 15 s of the fault; never hang,
never give a wrong number, never leave a worker, a host's bootstrap or a
/dev/shm entry behind. The counts are printed.

Marked ``netns``; skipped unless root with iproute2, OpenSSH and /dev/net/tun.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.reliability.chaos_jobs import LIMIT_S, judge, print_counts, rank_pids, signal_rank
from tests.reliability.reliability_jobs import WORKERS, finish, processes_with

from .jobs import start_ringrun_in
from .netns import Cluster
from .relay import ImpairedLink

pytestmark = pytest.mark.netns

FAULTS = ["sigkill", "sigkill_rank0", "sigstop", "link_down", "loss10", "timeline_disk_full"]
NP = 3
STEPS = 150


def _one_job(cluster: Cluster, rng: random.Random, fault: str, number: int) -> str:
    env = {"RING_TIMEOUT_SECONDS": "3"}
    if fault == "timeline_disk_full":
        env["RING_TIMELINE"] = "/dev/full"
    tag = f"netns-chaos-{os.getpid()}-{number}"
    link = ImpairedLink(cluster.namespaces[0], cluster.namespaces[1], ["--fault-loss", "0.1",
                                                                      "--seed", str(number)])
    with link:
        proc = start_ringrun_in(cluster, 0, ["-v", "--grace-period", "2", "--network-interface", link.name,
                                             "-H", cluster.hosts([2, 1]), sys.executable,
                                             WORKERS / "chaos.py", STEPS, tag], env=env)
        pids = rank_pids(proc, NP, time.monotonic() + 60)
        assert len(pids) == NP, "the job did not start"
        time.sleep(rng.uniform(0.0, 1.5))
        fault_at = time.monotonic()
        if fault in ("link_down", "loss10"):
            link.fault(down=fault == "link_down")
        elif fault != "timeline_disk_full":
            signal_rank(fault, pids, rng)
        rest = proc.stdout.read() if proc.poll() is not None else ""
        job = finish(proc, tag, timeout=LIMIT_S + 30)
        took = time.monotonic() - fault_at
    outcome = judge(job, rest + job.output, took, fault, NP)
    bootstraps = processes_with(f"ringrun-bootstrap {job.job_id}") if job.job_id else []
    assert bootstraps == [], bootstraps
    return outcome


@pytest.mark.slow
def test_netns_chaos_run(cluster: Cluster) -> None:
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun for the relay link")
    jobs = int(os.environ.get("CHAOS_JOBS", "100"))
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "1")))
    counts: Counter = Counter()
    started = time.monotonic()
    for number in range(jobs):
        fault = rng.choice(FAULTS)
        counts[(fault, _one_job(cluster, rng, fault, number))] += 1
    print_counts(f"netns chaos run: {jobs} jobs of {NP} ranks on 2 hosts in {time.monotonic() - started:.0f} s",
                 counts)
