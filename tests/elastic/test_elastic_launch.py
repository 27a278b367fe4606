"""Elastic ``ringrun`` jobs: workers that fail, leave and join while the job runs.

Real jobs of ``elastic_train.py`` on loopback "hosts" 127.0.0.x, listed by a
discovery script that prints a file the test rewrites. Each test checks what
the driver decided (its ``world``/``started`` lines), what the workers did
(same pids across worlds, equal final parameters, within 1e-5 of one
process training on the global batches) and that nothing was left behind.
Detection (failure to the survivors' exception) and recovery (failure to
the first step in the new world) times are printed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from elastic_jobs import ElasticJob, Finished, clean, params, timings
from elastic_train import reference

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
STEPS = 40
END_SECONDS = 30.0  # an elastic job that must fail ends within this


def _finished_equal(run: Finished, steps: int) -> np.ndarray:
    """Every finished worker trained ``steps`` steps to the same parameters, close to one process's."""
    done = run.done()
    assert done, run.tail()
    values = {hex_ for _, _, hex_ in done.values()}
    assert len(values) == 1, f"ranks disagree: {done}\n{run.tail()}"
    assert {s for _, s, _ in done.values()} == {steps}, done
    got = params(values.pop())
    np.testing.assert_allclose(got, reference(steps), rtol=0, atol=1e-5)
    return got


def _pids(run: Finished) -> Dict[int, List[int]]:
    """Each worker's pid in each world it joined, in order."""
    pids: Dict[int, List[int]] = {}
    for line in run.joined():
        pids.setdefault(int(line["worker"]), []).append(int(line["pid"]))
    return pids


@pytest.mark.parametrize("mode", ["sigkill", "raise"])
def test_failed_worker_3_to_2(tmp_path: Path, mode: str) -> None:
    """Worker 1 fails mid-training: the others go on in their own processes, its host is not used again."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], env={"TRAIN_FAIL": f"1:15:{mode}"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds() == {1: list(zip([0, 1, 2], HOSTS)), 2: [(0, HOSTS[0]), (2, HOSTS[2])]}, run.tail()
    assert sorted(run.started()) == [0, 1, 2], "the failed host got a new worker:\n" + run.tail()
    assert "host 127.0.0.2 is blacklisted for good" in run.output, run.tail()
    pids = _pids(run)
    for w in (0, 2):
        assert pids[w] == [run.started()[w][1]] * 2, f"worker {w} changed process: {pids}"
    # Committed after every step: the step being taken when worker 1 failed is the only one redone.
    assert set(run.synced_steps(2).values()) == {15}, run.synced_steps(2)
    _finished_equal(run, STEPS)
    timings(run, [0, 2], 2, f"{mode} of 1 of 3")
    clean(run)


def test_fixed_hosts_fault_tolerance(tmp_path: Path) -> None:
    """-H with --min-np: two workers share a host (shared memory); one of them fails,
    its neighbour trains on, and nothing new starts on the blacklisted host."""
    job = ElasticJob(tmp_path, None, ["-H", "127.0.0.1:2,127.0.0.2:1", "--min-np", 2],
                     env={"TRAIN_FAIL": "1:15:sigkill"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds() == {1: [(0, HOSTS[0]), (1, HOSTS[0]), (2, HOSTS[1])], 2: [(0, HOSTS[0]), (2, HOSTS[1])]}, \
        run.tail()
    assert sorted(run.started()) == [0, 1, 2], run.tail()
    _finished_equal(run, STEPS)
    clean(run)


def test_rank0_killed(tmp_path: Path) -> None:
    """The next-oldest worker becomes rank 0 and training goes on from its state."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], env={"TRAIN_FAIL": "0:15:sigkill"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == [(1, HOSTS[1]), (2, HOSTS[2])], run.tail()
    ranks = {(int(j["world"]), int(j["worker"])): int(j["rank"]) for j in run.joined()}
    assert ranks[2, 1] == 0 and ranks[2, 2] == 1, ranks
    assert run.done()[1][0] == 0, run.done()
    _finished_equal(run, STEPS)
    timings(run, [1, 2], 2, "sigkill of rank 0 of 3")
    clean(run)


def test_world_that_cannot_form_is_skipped(tmp_path: Path) -> None:
    """A worker lost while the next world forms: the others give up on that world
    at once and go on in the one after it."""
    hosts = HOSTS + ["127.0.0.4"]
    job = ElasticJob(tmp_path, hosts, ["-np", 4, "--min-np", 2],
                     env={"TRAIN_FAIL": "1:15:sigkill", "TRAIN_DIE_ON_RESET": "3"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    worlds = run.worlds()
    assert [w for w, _ in worlds[2]] == [0, 2, 3] and [w for w, _ in worlds[3]] == [0, 2], run.tail()
    assert "world 2 did not form" in run.output, run.tail()
    assert run.seconds < END_SECONDS, run.tail()
    _finished_equal(run, STEPS)
    clean(run)


def test_stopped_worker_is_taken_for_lost(tmp_path: Path) -> None:
    """A SIGSTOPped worker: the others time out, ask for a new world, and the driver kills the silent one."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2],
                     env={"TRAIN_FAIL": "2:15:stop", "RING_TIMEOUT_SECONDS": "3"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == [(0, HOSTS[0]), (1, HOSTS[1])], run.tail()
    assert "taking it for lost" in run.output and "host 127.0.0.3 is blacklisted" in run.output, run.tail()
    _finished_equal(run, STEPS)
    # The timeout (3 s) plus the driver's grace for the silent member (5 s).
    timings(run, [0, 1], 2, "sigstop of 1 of 3", error="RingTimeoutError", recover_within=15.0)
    clean(run)


def test_every_rank_resetting_reforms_the_same_workers(tmp_path: Path) -> None:
    """Every rank raises HorovodInternalError and resets, nobody is lost: the same workers form a new world."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3], env={"TRAIN_FAIL": "all:10:internal"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds() == {1: list(zip([0, 1, 2], HOSTS)), 2: list(zip([0, 1, 2], HOSTS))}, run.tail()
    assert "every member of world 1 asked for a new world" in run.output and "blacklisted" not in run.output, run.tail()
    assert set(run.synced_steps(2).values()) == {10}, run.synced_steps(2)
    _finished_equal(run, STEPS)
    clean(run)


def test_reset_without_elastic_launcher_reforms_the_same_ranks(tmp_path: Path) -> None:
    """Under plain ringrun (no elastic option) the same loop resets into the same ranks and trains on."""
    job = ElasticJob(tmp_path, None, ["-np", 2], env={"TRAIN_FAIL": "all:10:internal"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.output.count("caught HorovodInternalError") == 2 and "ringrun: world" not in run.output, run.tail()
    assert {w: len(set(p)) for w, p in _pids(run).items()} == {0: 1, 1: 1}, _pids(run)
    assert run.synced_steps(0) == {0: 10, 1: 10}, run.tail()  # the last sync, after the reset: from the commit
    _finished_equal(run, STEPS)
    clean(run)


def test_host_added_2_to_3(tmp_path: Path) -> None:
    """A host the discovery script starts listing gets a worker, which takes rank 0's state."""
    steps = 150
    job = ElasticJob(tmp_path, HOSTS[:2], ["-np", 2, "--max-np", 3],
                     env={"TRAIN_STEPS": str(steps), "TRAIN_SLEEP": "0.02"})
    job.wait_progress(10, size=2)
    added_at = time.time()
    job.set_hosts(HOSTS)
    job.wait_progress(0, size=3)
    run = job.finish()
    assert run.returncode == 0, run.tail()
    worlds = run.worlds()
    assert worlds[2] == list(zip([0, 1, 2], HOSTS)), run.tail()
    joined_at = max(j["at"] for j in run.joined() if j["world"] == 2)
    print(f"host added: every rank in world 2 {joined_at - added_at:.3f} s after the discovery file changed")
    synced = run.synced(2)
    assert sorted(synced) == [0, 1, 2] and len(set(synced.values())) == 1, f"world 2 sync: {synced}"
    assert "blacklisted" not in run.output and "caught" not in run.output, run.tail()
    _finished_equal(run, steps)
    clean(run)


def test_host_removed_then_listed_again(tmp_path: Path) -> None:
    """A host no longer listed: its worker leaves (not a failure); listed again, a new worker joins."""
    steps = 250
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2],
                     env={"TRAIN_STEPS": str(steps), "TRAIN_SLEEP": "0.02"})
    job.wait_progress(10, size=3)
    job.set_hosts(HOSTS[:2])
    job.wait_progress(0, size=2)
    job.set_hosts(HOSTS)
    job.wait_progress(0, size=3)
    run = job.finish()
    assert run.returncode == 0, run.tail()
    worlds = run.worlds()
    assert worlds[2] == list(zip([0, 1], HOSTS)), run.tail()
    assert worlds[3] == [(0, HOSTS[0]), (1, HOSTS[1]), (3, HOSTS[2])], run.tail()
    assert "worker 2 on 127.0.0.3 left the job (exited with code 0)" in run.output, run.tail()
    assert "blacklisted" not in run.output and "caught" not in run.output, run.tail()
    assert len(set(run.synced(3).values())) == 1, run.synced(3)
    _finished_equal(run, steps)
    clean(run)


def test_blacklist_cooldown_lets_the_host_back(tmp_path: Path) -> None:
    """With --blacklist-cooldown-range a failed host gets a new worker once its cooldown ends."""
    steps = 200
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2, "--blacklist-cooldown-range", 1, 2],
                     env={"TRAIN_STEPS": str(steps), "TRAIN_SLEEP": "0.02", "TRAIN_FAIL": "1:10:exit3"})
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.started().get(3, ("",))[0] == HOSTS[1], run.tail()
    assert run.worlds()[3] == [(0, HOSTS[0]), (2, HOSTS[2]), (3, HOSTS[1])], run.tail()
    _finished_equal(run, steps)
    clean(run)


@pytest.mark.parametrize("case", ["reset-limit", "min-np-timeout", "every-host-failed"])
def test_job_ends_as_documented(tmp_path: Path, case: str) -> None:
    """--reset-limit, the --min-np timeout and every host failing each end the job with a message."""
    hosts = HOSTS
    if case == "reset-limit":
        args, fail, message = ["-np", 3, "--min-np", 1, "--reset-limit", 0], "1:5:sigkill", "more than --reset-limit 0"
    elif case == "min-np-timeout":
        args, fail = ["-np", 3, "--min-np", 3, "--elastic-timeout", 2], "1:5:sigkill"
        message = "fewer than --min-np 3 workers for 2 s (--elastic-timeout)"
    else:
        hosts, args, fail = None, ["-H", "127.0.0.1:1,127.0.0.2:1", "--min-np", 1], "all:5:exit3"
        message = "every host failed: 127.0.0.1, 127.0.0.2 blacklisted"
    job = ElasticJob(tmp_path, hosts, args, env={"TRAIN_FAIL": fail, "TRAIN_STEPS": "1000"})
    run = job.finish()
    assert run.returncode == 1 and message in run.output, run.tail()
    assert run.seconds < END_SECONDS, run.tail()
    clean(run)
