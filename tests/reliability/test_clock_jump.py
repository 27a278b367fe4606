"""A host whose clock jumps mid-job: one rank under libfaketime.

Rank 0 of a two-rank job (the coordinator, which also runs the stall
inspector) runs under libfaketime (workers/clock_jump.py). Once the job
runs, the test steps that rank's clock an hour forward and, a second later,
back. With ``RING_TIMEOUT_SECONDS``, ``RING_STALL_CHECK_TIME_SECONDS`` and
``RING_STALL_SHUTDOWN_TIME_SECONDS`` at 5 s, any timeout, stall check or
liveness check that read the jumping clock would fire.

- ``wall``: only the wall clock (CLOCK_REALTIME) jumps, as when NTP or an
  administrator steps a host's time. The engine and the Python package time
  everything with the monotonic clock, so the job completes, every result
  bitwise right, with no stall warning; over shared memory and over TCP.
- ``all``: the monotonic clock jumps too, which Linux never does (it may
  not go backward), and libfaketime fakes it only in the calls it
  intercepts. Promised: the job completes or every rank raises, within the
  test's limit; never a hang. Both happen: mostly it completes; a forward
  jump while a tensor waits on the coordinator makes the stall inspector
  end the job (``RingTimeoutError`` on every rank). What happened is
  printed (``-s``); docs/errors.md says the same.

libfaketime comes from the Debian package ``faketime`` (``make sysdeps``);
without it the tests skip.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Set, Tuple

import pytest
from reliability_jobs import WORKERS, JobResult, finish, start_job_tagged

WORKER = WORKERS / "clock_jump.py"
NP = 2
VICTIM = 0
JUMP_SECONDS = 3600
HOLD_SECONDS = 1.0  # how long each offset lasts
LIMIT_SECONDS = 45.0  # the whole job, jumps included
# Far below the jump, so any of them reading the jumping clock fires; above
# what a loaded machine's scheduling delays reach.
ENV = {"RING_TIMEOUT_SECONDS": "5", "RING_STALL_CHECK_TIME_SECONDS": "5", "RING_STALL_SHUTDOWN_TIME_SECONDS": "5"}
_VICTIM_LINE = re.compile(r"victim pid (\d+) clock steps: wall (\S+) (\S+) monotonic (\S+) (\S+)")
_FAKETIME_SHM = "/dev/shm/*faketime_*"  # what libfaketime leaves: faketime_shm_<pid>, sem.faketime_sem_<pid>


def _libfaketime() -> Optional[str]:
    """libfaketime's multithreaded build (the engine has threads), where Debian or its ``make install`` put it."""
    found = [path for folder in ("/usr/lib/*/faketime", "/usr/local/lib/faketime")
             for path in glob.glob(f"{folder}/libfaketimeMT.so.1")]
    return found[0] if found else None


LIBFAKETIME = _libfaketime()
pytestmark = pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime is not installed (Debian package "
                                "'faketime'; `make sysdeps` installs it as root)")

_jobs: Dict[Tuple[str, str], Tuple[JobResult, float]] = {}


def _set_offset(gate: Path, seconds: int) -> None:
    partial = gate / "offset.partial"
    partial.write_text(f"{seconds:+d}\n")
    partial.rename(gate / "offset")  # libfaketime never reads half a file


def _jump(gate: Path, proc: subprocess.Popen) -> None:
    """Once the job runs: the victim's clock an hour forward, then back."""
    deadline = time.monotonic() + 60
    while not (gate / "started").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return  # the job's output says why
        time.sleep(0.05)
    _set_offset(gate, JUMP_SECONDS)
    time.sleep(HOLD_SECONDS)
    _set_offset(gate, 0)
    time.sleep(HOLD_SECONDS)


def _remove_faketime_shm(before: Set[str]) -> None:
    """libfaketime's own segments of processes now gone (not the engine's)."""
    for path in set(glob.glob(_FAKETIME_SHM)) - before:
        pid = path.rsplit("_", 1)[-1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            os.unlink(path)


def _job(clocks: str, transport: str) -> Tuple[JobResult, float]:
    """The job and its duration in seconds, run once per module."""
    key = (clocks, transport)
    if key not in _jobs:
        gate = Path(tempfile.mkdtemp(prefix="ring-clock-"))
        _set_offset(gate, 0)
        before = set(glob.glob(_FAKETIME_SHM))
        started = time.monotonic()
        proc, tag = start_job_tagged(NP, [WORKER, gate, VICTIM, clocks, LIBFAKETIME],
                                     env={**ENV, "RING_TRANSPORT": transport})
        try:
            _jump(gate, proc)
        finally:
            (gate / "finish").touch()
            job = finish(proc, tag, timeout=LIMIT_SECONDS)
            _jobs[key] = (job, time.monotonic() - started)
            _remove_faketime_shm(before)
            shutil.rmtree(gate, ignore_errors=True)
    return _jobs[key]


def _clock_steps(job: JobResult) -> Dict[str, float]:
    m = _VICTIM_LINE.search(job.output)
    assert m is not None, job.tail()
    return dict(zip(["wall_max", "wall_min", "mono_max", "mono_min"], map(float, m.groups()[1:])))


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_wall_clock_jump_leaves_the_job_correct(transport: str) -> None:
    job, took = _job("wall", transport)
    print(f"wall/{transport}: {took:.1f} s")
    assert job.returncode == 0, job.tail()
    assert all(f"{r}: ok " in job.output for r in range(NP)), job.tail()
    assert "stall" not in job.output and " caught " not in job.output, job.tail()
    steps = _clock_steps(job)
    assert steps["wall_max"] > 0.9 * JUMP_SECONDS and steps["wall_min"] < -0.9 * JUMP_SECONDS, steps  # it jumped
    assert 0 <= steps["mono_min"] and steps["mono_max"] < 5, steps
    assert job.leftover_processes == [] and job.leftover_segments == [], job.tail()


def test_monotonic_clock_jump_ends_or_fails_cleanly() -> None:
    job, took = _job("all", "tcp")
    assert "[the test stopped" not in job.output, job.tail()  # no hang
    caught = job.caught()
    if job.returncode == 0:
        steps = _clock_steps(job)
        assert steps["mono_max"] > 0.9 * JUMP_SECONDS, steps  # it jumped
        print(f"all/tcp: completed in {took:.1f} s; clock steps {steps}")
    else:
        assert sorted(caught) == list(range(NP)), job.tail()
        print(f"all/tcp: every rank raised, in {took:.1f} s: {caught}")
    assert "AssertionError" not in job.output, job.tail()  # no wrong number
    assert job.leftover_processes == [] and job.leftover_segments == [], job.tail()
