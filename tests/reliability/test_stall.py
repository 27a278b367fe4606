"""The stall inspector: a rank that stops submitting.

Rank 0 warns on its stderr once a tensor has waited for some ranks for
``RING_STALL_CHECK_TIME_SECONDS`` (default 60), naming the tensors and the
ranks that have not submitted them; the job goes on when the late rank
catches up. ``RING_STALL_SHUTDOWN_TIME_SECONDS`` turns such a stall into an
error on every rank. Jobs: workers/stall.py on three ranks.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Dict, List

import pytest
from reliability_jobs import WORKERS, JobResult, run_job

from ring_strategy import _native

WORKER = WORKERS / "stall.py"
NP = 3
CHECK_SECONDS = 2.0
SHUTDOWN_SECONDS = 3.0
_WARNING = re.compile(r"^\[(\d+)\] \[(\S+ \S+) ring rank (\d+) warning\] stall: (.*)$", re.M)
_STALLING = re.compile(r"^\[\d+\] rank (\d+) stalling at ([\d.]+)$", re.M)

_jobs: Dict[str, JobResult] = {}


def _job(name: str, mode: str, hold: float, env: Dict[str, str]) -> JobResult:
    """Runs the job ``name`` once per module."""
    if name not in _jobs:
        _jobs[name] = run_job(NP, [WORKER, mode, hold], env=env, timeout=120)
    return _jobs[name]


def _late(check: float, hold: float) -> JobResult:
    """Rank 1 submits ``stall.missing`` ``hold`` seconds after the others."""
    return _job(f"late-{check}-{hold}", "late", hold, {"RING_STALL_CHECK_TIME_SECONDS": f"{check:g}"})


def _stall_start(job: JobResult) -> float:
    times = [float(m[2]) for m in _STALLING.finditer(job.output)]
    assert len(times) == NP, job.tail()
    return max(times)


def _warnings(job: JobResult) -> List[re.Match]:
    return list(_WARNING.finditer(job.output))


def test_warning_names_tensor_and_missing_rank() -> None:
    job = _late(CHECK_SECONDS, 5.0)
    warnings = _warnings(job)
    assert warnings, f"no stall warning:\n{job.tail()}"
    assert {(w[1], w[3]) for w in warnings} == {("0", "0")}, "a rank other than 0 warned"
    first = warnings[0]
    assert "'stall.missing'" in first[4] and "not submitted by rank 1)" in first[4], first[0]
    assert "RING_STALL_CHECK_TIME_SECONDS" in first[4], first[0]
    after = datetime.strptime(first[2], "%Y-%m-%d %H:%M:%S.%f").timestamp() - _stall_start(job)
    print(f"first stall warning {after:.2f} s into the stall (RING_STALL_CHECK_TIME_SECONDS={CHECK_SECONDS:g})")
    assert CHECK_SECONDS - 0.3 <= after <= CHECK_SECONDS + 3, after


def test_job_goes_on_after_a_stall() -> None:
    job = _late(CHECK_SECONDS, 5.0)
    assert job.returncode == 0, job.tail()
    assert sum(f"{r}: done" in job.output for r in range(NP)) == NP, job.tail()
    assert job.leftover_processes == [] and job.leftover_segments == []


def test_no_warning_for_a_stall_shorter_than_the_check_time() -> None:
    job = _late(10.0, 2.0)
    assert job.returncode == 0, job.tail()
    assert _warnings(job) == [], job.tail()


def test_shutdown_time_fails_every_rank() -> None:
    env = {"RING_STALL_SHUTDOWN_TIME_SECONDS": f"{SHUTDOWN_SECONDS:g}"}
    job = _job("diverged", "diverged", 20.0, env)
    caught = job.caught()
    assert sorted(caught) == list(range(NP)), job.tail()
    start = _stall_start(job)
    for rank, err in caught.items():
        took = err.at - start
        print(f"rank {rank}: {err.cls} {took:.2f} s into the stall: {err.message}")
        assert issubclass(getattr(_native, err.cls), _native.RingError), err.cls
        assert "RING_STALL_SHUTDOWN_TIME_SECONDS" in err.message, err.message
        assert "'stall.missing' (" in err.message and "not submitted by rank 1)" in err.message, err.message
        assert "'stall.other' (" in err.message and "not submitted by ranks 0, 2)" in err.message, err.message
        assert SHUTDOWN_SECONDS - 0.3 <= took <= SHUTDOWN_SECONDS + 5, took
    assert job.leftover_processes == [] and job.leftover_segments == []


@pytest.mark.parametrize("name, alias, default", [
    ("RING_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", "60"),
    ("RING_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"),
])
def test_stall_settings_and_defaults(name: str, alias: str, default: str) -> None:
    table = {row[0]: row for row in _native.config_table()}
    assert table[name][1:3] == (alias, default), table.get(name)


def test_mismatched_collectives_are_named_and_end_every_rank() -> None:
    """Ranks 0 and 2 in an allgather, rank 1 in a barrier (a suite's
    tearDown after a rank skipped a step): the warning and the error name
    each collective, so what every rank waits on, and every rank ends."""
    env = {"RING_STALL_CHECK_TIME_SECONDS": f"{CHECK_SECONDS:g}",
           "RING_STALL_SHUTDOWN_TIME_SECONDS": f"{SHUTDOWN_SECONDS + 1:g}"}
    job = _job("mismatched", "mismatched", 20.0, env)
    warnings = _warnings(job)
    assert warnings, f"no stall warning:\n{job.tail()}"
    for text in [warnings[0][4]] + [err.message for err in job.caught().values()]:
        assert "'stall.gather' (allgather, " in text and "not submitted by rank 1)" in text, text
        assert "'barrier." in text and "(barrier, " in text and "not submitted by ranks 0, 2)" in text, text
    caught = job.caught()
    assert sorted(caught) == list(range(NP)), job.tail()
    start = _stall_start(job)
    for rank, err in caught.items():
        took = err.at - start
        print(f"rank {rank}: {err.cls} {took:.2f} s into the stall")
        assert err.cls == "RingTimeoutError" and "RING_STALL_SHUTDOWN_TIME_SECONDS" in err.message, err
        assert SHUTDOWN_SECONDS + 1 - 0.3 <= took <= SHUTDOWN_SECONDS + 6, took
    assert job.leftover_processes == [] and job.leftover_segments == []
