"""The gradient schedule rule (ring_strategy/_schedule.py): what ``auto``
picks from the CPUs per rank, what RING_GRADIENT_SCHEDULE forces, and the
error for anything else."""

from __future__ import annotations

import os
import sys

import pytest

from ring_strategy._schedule import AFTER_BACKWARD, OVERLAP, VARIABLE, cpus_per_rank, gradient_schedule
from tests.jobs import run_ringrun


def test_auto_overlaps_only_with_a_spare_cpu_per_rank() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert cpus_per_rank(1) == cpus and cpus_per_rank(cpus) == 1.0
    assert gradient_schedule("auto", local_size=cpus, environ={}) == AFTER_BACKWARD  # one CPU per rank
    assert gradient_schedule(None, local_size=cpus, environ={}) == AFTER_BACKWARD
    if cpus >= 2:
        assert gradient_schedule("auto", local_size=cpus // 2, environ={}) == OVERLAP


@pytest.mark.parametrize("text, schedule", [("overlap", OVERLAP), ("AFTER_BACKWARD", AFTER_BACKWARD),
                                            (" auto ", None)])
def test_the_variable_forces_a_schedule(text: str, schedule: str) -> None:
    got = gradient_schedule(None, local_size=10 ** 6, environ={VARIABLE: text})
    assert got == (schedule or AFTER_BACKWARD)  # auto with a million ranks per host: no spare CPU


def test_anything_else_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="RING_GRADIENT_SCHEDULE should be auto, overlap or after_backward. "
                                         "Got: 'sometimes'"):
        gradient_schedule(None, environ={VARIABLE: "sometimes"})
    with pytest.raises(ValueError, match="gradient_schedule should be auto, overlap or after_backward"):
        gradient_schedule("eager")


_REPORT = ("import ring_strategy as rs; from ring_strategy._schedule import cpus_per_rank; rs.init(); "
           "print('cpus', rs.rank(), cpus_per_rank(), flush=True); rs.shutdown()")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind two ranks apart")
@pytest.mark.parametrize("bind, expected", [("apart", 1.0), ("together", 0.5), ("unbound", None)])
def test_a_running_job_counts_the_cores_each_rank_is_bound_to(bind: str, expected: float) -> None:
    """Ranks a launcher bound to cores of their own (as mpirun does) count
    those cores, not the host's shared among them; ranks sharing CPUs count
    their share (the engine's waits spin only from one CPU a rank)."""
    first = min(os.sched_getaffinity(0))
    cpu = {"apart": f"$(({first} + RING_LOCAL_RANK))", "together": str(first)}.get(bind)
    shell = f'exec taskset -c {cpu} "$0" -c "$1"' if cpu else 'exec "$0" -c "$1"'
    job = run_ringrun(2, ["sh", "-c", shell, sys.executable, _REPORT], timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr
    counts = sorted(line.split()[-1] for line in job.stdout.splitlines() if "cpus" in line)
    want = len(os.sched_getaffinity(0)) / 2 if expected is None else expected
    assert counts == [repr(float(want))] * 2, job.stdout
