"""Lost peers: one rank of a three-rank job fails during an allreduce loop.

The promise: every other rank raises a peer-failure error naming the lost
rank (host, pid) and the tensor within 10 s; ``ringrun`` exits non-zero
naming the rank; no process and no shared-memory segment is left behind.
A rank that is alive but silent (SIGSTOP) ends in a ``RingTimeoutError``
after ``RING_TIMEOUT_SECONDS``.

Each job (a failure mode on a transport) runs once per module; the tests
read its output. The survivors ignore SIGTERM, so their errors come from the
engine and not from ringrun stopping them (see workers/lost_peer.py).
"""

from __future__ import annotations

import socket
from typing import Dict, Tuple

import pytest
from reliability_jobs import WORKERS, Caught, JobResult, run_job

WORKER = WORKERS / "lost_peer.py"
TENSOR = "lost.peer.grad"
NP = 3
VICTIM = 1
DEADLINE_SECONDS = 10.0  # the promise, with RING_TIMEOUT_SECONDS at its default
STOP_TIMEOUT_SECONDS = 3.0
TRANSPORTS = ["shm", "tcp"]
DEAD_MODES = ["sigkill", "sigkill-idle", "exit", "raise"]

_jobs: Dict[Tuple[str, str], JobResult] = {}


def _job(mode: str, transport: str) -> JobResult:
    """The job in which rank VICTIM fails by ``mode`` on ``transport`` (run once)."""
    key = (mode, transport)
    if key not in _jobs:
        env = {"RING_TRANSPORT": transport}
        if mode == "stop":
            env["RING_TIMEOUT_SECONDS"] = f"{STOP_TIMEOUT_SECONDS:g}"
        _jobs[key] = run_job(NP, [WORKER, mode, VICTIM], env=env, timeout=120, grace=30 if mode != "stop" else 2)
    return _jobs[key]


def _survivor_errors(job: JobResult) -> Dict[int, Caught]:
    """Every survivor's caught error; fails when one has none."""
    caught = job.caught()
    missing = sorted(set(range(NP)) - {VICTIM} - set(caught))
    assert not missing, f"ranks {missing} reported no error:\n{job.tail()}"
    assert job.victim() is not None, job.tail()
    return caught


def _lost_rank_name(job: JobResult) -> str:
    """How the engine names the victim: ``rank 1 (host, pid N)``."""
    victim = job.victim()
    assert victim is not None, job.tail()
    return f"rank {VICTIM} ({socket.gethostname()}, pid {victim['pid']})"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", [m for m in DEAD_MODES if m != "sigkill-idle"] + ["stop"])
def test_victim_fails_mid_transfer(mode: str, transport: str) -> None:
    """The premise of these modes: the victim's allreduce was still running."""
    victim = _job(mode, transport).victim()
    assert victim is not None and victim["in_flight"], victim


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", DEAD_MODES)
def test_every_survivor_raises_within_deadline(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    victim = job.victim()
    for rank, err in _survivor_errors(job).items():
        took = err.at - victim["at"]
        print(f"{mode}/{transport}: rank {rank} raised {err.cls} {took:.3f} s after rank {VICTIM} failed")
        assert took < DEADLINE_SECONDS, f"rank {rank} took {took:.1f} s:\n{job.tail()}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", DEAD_MODES)
def test_error_is_peer_failure(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    for rank, err in _survivor_errors(job).items():
        assert err.cls == "PeerFailureError", f"rank {rank}: {err}\n{job.tail()}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", DEAD_MODES)
def test_error_names_lost_rank_host_and_pid(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    name = _lost_rank_name(job)
    for rank, err in _survivor_errors(job).items():
        assert name in err.message, f"rank {rank} does not name {name!r}: {err.message}"


@pytest.mark.parametrize("mode, transport", [(m, t) for m in DEAD_MODES for t in TRANSPORTS])
def test_error_names_tensor(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    for rank, err in _survivor_errors(job).items():
        assert repr(TENSOR) in err.message, f"rank {rank}: {err.message}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", DEAD_MODES)
def test_ringrun_fails_naming_the_rank(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    assert job.returncode != 0, job.tail()
    assert f"ringrun: rank {VICTIM} " in job.output, job.tail()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", DEAD_MODES + ["stop"])
def test_nothing_left_behind(mode: str, transport: str) -> None:
    job = _job(mode, transport)
    assert job.job_id, job.tail()
    assert job.leftover_processes == [], job.leftover_processes
    assert job.leftover_segments == [], job.leftover_segments


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_silent_peer_times_out(transport: str) -> None:
    """A stopped rank: the others raise RingTimeoutError after RING_TIMEOUT_SECONDS."""
    job = _job("stop", transport)
    victim, name = job.victim(), _lost_rank_name(job)
    for rank, err in _survivor_errors(job).items():
        took = err.at - victim["at"]
        print(f"stop/{transport}: rank {rank} raised {err.cls} {took:.3f} s after rank {VICTIM} stopped")
        assert err.cls == "RingTimeoutError", f"rank {rank}: {err}"
        assert "RING_TIMEOUT_SECONDS" in err.message and name in err.message, err.message
        assert STOP_TIMEOUT_SECONDS - 0.5 <= took < STOP_TIMEOUT_SECONDS + 7, f"rank {rank} took {took:.1f} s"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_silent_peer_timeout_names_tensor(transport: str) -> None:
    job = _job("stop", transport)
    for rank, err in _survivor_errors(job).items():
        assert repr(TENSOR) in err.message, f"rank {rank}: {err.message}"
