"""Bad input on real ranks: a clear exception on every rank, and the engine
keeps working afterwards.

The basic cases live in tests/test_core_collectives.py (scenarios
``mismatch``, ``bad_arguments``, ``after_shutdown``, the grid's empty
tensors, ``test_before_init_is_shutdown_error``) and in the torch front
end's ``errors`` scenario (a process set other than the global one). This
module adds what they do not check: each rank's value in mismatch errors,
more fields and operations, alltoall splits, non-contiguous and empty
tensors of every shape, wrong argument types, names reused across
operations, ``init()`` twice, root ranks that are not valid integers, ranks
naming different process sets, a dropped handle and invalid configuration.

One job per world size runs every scenario of workers/bad_input.py in
sequence; each test reads its scenario's ``<rank>: <scenario> ok`` lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict

import pytest
from reliability_jobs import WORKERS, JobResult, job_environment, run_job

from tests.workers.checks import passed_ranks

WORKER = WORKERS / "bad_input.py"
SIZES = [2, 3]
SCENARIOS = ["mismatch_values", "alltoall_splits", "non_contiguous", "zero_size", "wrong_types",
             "duplicate_names", "init_twice", "process_sets", "root_rank_fractional", "root_rank_huge"]
_jobs: Dict[int, JobResult] = {}


def _job(np_: int) -> JobResult:
    """Every scenario at world size ``np_`` (run once per module)."""
    if np_ not in _jobs:
        _jobs[np_] = run_job(np_, [WORKER, *SCENARIOS], timeout=240)
    return _jobs[np_]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("np_", SIZES)
def test_scenario(np_: int, scenario: str) -> None:
    job = _job(np_)
    assert len(passed_ranks(job.output, scenario)) == np_, f"{scenario} at np={np_}:\n{job.tail(8000)}"


@pytest.mark.parametrize("np_", SIZES)
def test_job_ends_cleanly(np_: int) -> None:
    job = _job(np_)
    assert job.returncode == 0, job.tail()
    assert job.leftover_processes == [] and job.leftover_segments == []


def test_dropped_handle_does_not_crash() -> None:
    """The arrays of a dropped Handle stay alive until the engine is done."""
    job = run_job(2, [WORKER, "dropped_handle"], timeout=120)
    assert job.output.count(": dropped_handle ok") == 2, job.tail()
    assert job.returncode == 0, job.tail()


@pytest.mark.parametrize("variable, value", [
    ("RING_TIMEOUT_SECONDS", "abc"), ("RING_TIMEOUT_SECONDS", "-1"), ("RING_FUSION_THRESHOLD", "1e99x"),
    ("RING_CYCLE_TIME", "nan"), ("RING_TRANSPORT", "udp"), ("RING_CACHE_CAPACITY", "-5"),
    ("RING_START_TIMEOUT", "nan"), ("RING_START_TIMEOUT", "0"), ("RING_START_TIMEOUT", "soon"),
])
def test_invalid_configuration_is_a_bad_argument(variable: str, value: str) -> None:
    """init() rejects an invalid RING_ variable, quoting its name and value."""
    code = ("import ring_strategy as rs\n"
            "try:\n    rs.init()\nexcept rs.BadArgumentError as e:\n    print('raised:', e)\n")
    env = {k: v for k, v in job_environment().items() if not k.startswith(("RING_", "HOROVOD_"))}
    env[variable] = value
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(__file__))
    assert f"raised: {variable}" in proc.stdout and repr(value) in proc.stdout, proc.stdout + proc.stderr
