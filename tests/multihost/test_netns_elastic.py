"""Elastic ringrun across namespace hosts (tests/multihost): workers on other
hosts start over ssh as the discovery script lists them, and a host whose
programs all die is blacklisted while the job goes on without it.

Marked ``netns``; skipped unless root with iproute2 and OpenSSH.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from tests.elastic.elastic_jobs import ElasticJob, clean, params
from tests.elastic.elastic_train import reference

from .netns import Cluster

pytestmark = pytest.mark.netns


# The addresses peers use: found per world from the routes between the hosts,
# or --network-interface's (slow-marked: the same job, to keep make test short).
@pytest.mark.parametrize("interface", [None, pytest.param("eth0", marks=pytest.mark.slow)])
def test_job_grows_onto_a_remote_host_and_goes_on_when_it_dies(cluster: Cluster, tmp_path: Path,
                                                               interface: Optional[str]) -> None:
    """2 hosts, then a third listed (its worker starts over ssh and joins), then
    every program of that third host killed: the job blacklists it, re-forms
    on the first two and ends with every survivor equal to one process;
    --output-filename has each worker's lines."""
    a = cluster.addresses
    steps = 160
    logs = tmp_path / "logs"
    flags = ["--network-interface", interface] if interface else []
    job = ElasticJob(tmp_path, [f"{a[0]}:1", f"{a[1]}:1"],
                     ["-i", cluster.key, "-np", 2, "--min-np", 2, "--max-np", 3, "--output-filename", logs, *flags],
                     env={**cluster.ringrun_env(), "TRAIN_STEPS": str(steps), "TRAIN_SLEEP": "0.03"},
                     prefix=cluster.exec_prefix(0))
    try:
        job.wait_progress(10, size=2)
        listed_at = time.monotonic()
        job.set_hosts([f"{a[0]}:1", f"{a[1]}:1", f"{a[2]}:1"])
        job.wait_progress(0, size=3)
        grown = time.monotonic() - listed_at
        killed = cluster.kill_processes(2)
        killed_at = time.monotonic()
        job.wait_progress(0, size=2)
        shrunk = time.monotonic() - killed_at
    finally:
        run = job.finish()
    assert run.returncode == 0, run.tail()
    print(f"[netns elastic] the job trained on 3 hosts {grown:.1f} s after the third was listed; "
          f"on 2 again {shrunk:.1f} s after the third host's {len(killed)} processes were killed")
    worlds = run.worlds()
    assert worlds[1] == [(0, a[0]), (1, a[1])], run.tail()
    assert worlds[2] == [(0, a[0]), (1, a[1]), (2, a[2])], run.tail()
    assert worlds[3] == [(0, a[0]), (1, a[1])] and max(worlds) == 3, run.tail()
    assert f"started worker 2 on {a[2]} over ssh" in run.output, run.tail()
    assert f"host {a[2]} is blacklisted" in run.output, run.tail()
    done = run.done()
    assert sorted(done) == [0, 1] and {s for _, s, _ in done.values()} == {steps}, run.tail()
    assert len({p for _, _, p in done.values()}) == 1, done
    np.testing.assert_allclose(params(done[0][2]), reference(steps), rtol=0, atol=1e-5)
    clean(run)
    for host in (1, 2):
        assert cluster.processes(host) == [], cluster.processes(host)
    for worker in range(3):
        lines = (logs / f"rank.{worker}" / "stdout").read_text()
        assert f"world 2 worker {worker} pid" in lines, lines[-2000:]
