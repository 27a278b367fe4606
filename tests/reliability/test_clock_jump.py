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

- ``wall`` over TCP also records a timeline (``HOROVOD_TIMELINE``) on the
  jumping rank: the file stays valid JSON and each row's timestamps go
  forward only, within the job's duration (the timeline times with the
  steady clock; only its header's epoch is wall time).
- Elastic discovery: ringrun's driver and its host discovery script run
  under libfaketime (wall clock only) while the wall clock jumps an hour
  forward and back; the script keeps running every ``--discovery-interval``
  (read from ``/proc/uptime``, which libfaketime leaves alone), no world
  forms by mistake, and a host listed after the jumps gets a worker at the
  next discovery. The workers run without libfaketime: its 0.9.10 release
  fails every ``clock_nanosleep`` on the real monotonic clock with EINVAL
  (Python's ``time.sleep``), which real hosts never do; the workers' clocks
  are the other tests' subject.

libfaketime comes from the Debian package ``faketime`` (``make sysdeps``);
without it the tests skip.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest
from reliability_jobs import WORKERS, JobResult, finish, start_job_tagged

from tests.elastic.elastic_jobs import ElasticJob, clean

WORKER = WORKERS / "clock_jump.py"
NP = 2
VICTIM = 0
JUMP_SECONDS = 3600
HOLD_SECONDS = 1.0  # how long each offset lasts
LIMIT_SECONDS = 45.0  # the whole job, jumps included
# Far below the jump, so any of them reading the jumping clock fires; above
# what a loaded machine's scheduling delays reach.
ENV = {"RING_TIMEOUT_SECONDS": "5", "RING_STALL_CHECK_TIME_SECONDS": "5", "RING_STALL_SHUTDOWN_TIME_SECONDS": "5"}
DISCOVERY_SECONDS = 0.5  # the elastic case's --discovery-interval
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

# The job whose rank 0 also writes a timeline (RING_TIMELINE) through the jumps.
TIMELINE_JOB = ("wall", "tcp")

_jobs: Dict[Tuple[str, str], Tuple[JobResult, float]] = {}
_timelines: Dict[Tuple[str, str], str] = {}  # the timeline's text, read before its folder goes


def _set_offset(gate: Path, seconds: int) -> None:
    partial = gate / "offset.partial"
    partial.write_text(f"{seconds:+d}\n")
    partial.rename(gate / "offset")  # libfaketime never reads half a file


def _faketime_prefix(gate: Path) -> List[str]:
    """A command line's head that runs it, and all it starts, with a wall clock offset read from ``gate``."""
    return ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME_TIMESTAMP_FILE={gate / 'offset'}", "FAKETIME_NO_CACHE=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1"]


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
        env = {**ENV, "RING_TRANSPORT": transport}
        if key == TIMELINE_JOB:
            env["HOROVOD_TIMELINE"] = str(gate / "timeline.json")
        started = time.monotonic()
        proc, tag = start_job_tagged(NP, [WORKER, gate, VICTIM, clocks, LIBFAKETIME], env=env)
        try:
            _jump(gate, proc)
        finally:
            (gate / "finish").touch()
            job = finish(proc, tag, timeout=LIMIT_SECONDS)
            _jobs[key] = (job, time.monotonic() - started)
            if key == TIMELINE_JOB:
                timeline = gate / "timeline.json"
                _timelines[key] = timeline.read_text() if timeline.exists() else ""
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


def test_timeline_through_a_wall_clock_jump_is_well_formed_and_monotonic() -> None:
    """Rank 0 records a timeline while its wall clock jumps: the file is
    valid JSON, and each row's timestamps never go back nor leap."""
    job, took = _job(*TIMELINE_JOB)
    assert job.returncode == 0, job.tail()
    events = json.loads(_timelines[TIMELINE_JOB])  # well-formed after shutdown
    rows: Dict[object, List[float]] = {}
    for e in events:
        if e.get("ph") in ("B", "E", "X", "i"):
            rows.setdefault((e["pid"], e.get("tid")), []).append(float(e["ts"]))
    assert rows and sum(map(len, rows.values())) > 100, events[:20]
    for row, stamps in rows.items():
        back = [(a, b) for a, b in zip(stamps, stamps[1:]) if b < a]
        assert not back, f"row {row} goes back: {back[:5]}"
    last = max(max(stamps) for stamps in rows.values())
    assert 0 <= min(min(stamps) for stamps in rows.values()) and last < took * 1e6, (last, took)
    print(f"timeline: {sum(map(len, rows.values()))} events on {len(rows)} rows over {last / 1e6:.2f} s")


def test_elastic_discovery_through_wall_clock_jumps_neither_misfires_nor_stalls(tmp_path: Path) -> None:
    """An elastic job whose host (ringrun's driver, its discovery script and
    its worker) jumps an hour forward and, a second later, back: the
    discovery script keeps running every interval, nothing times out, and a
    host listed after the jumps gets a worker at the next discovery."""
    gate, calls = tmp_path / "gate", tmp_path / "calls"
    gate.mkdir()
    _set_offset(gate, 0)
    (tmp_path / "hosts").write_text("127.0.0.1\n")
    before = set(glob.glob(_FAKETIME_SHM))
    # /proc/uptime: a clock libfaketime does not touch, read by the script at each discovery.
    script = f"cat /proc/uptime >> {calls}; cat {tmp_path / 'hosts'}"
    job = ElasticJob(tmp_path, None, ["--host-discovery-script", script, "--discovery-interval", DISCOVERY_SECONDS,
                                      "-np", 1, "--min-np", 1, "--max-np", 2],
                     env={"TRAIN_STEPS": "150", "TRAIN_SLEEP": "0.02"}, prefix=_faketime_prefix(gate),
                     worker_prefix=["env", "-u", "LD_PRELOAD"])
    try:
        job.wait_progress(3, size=1)
        _set_offset(gate, JUMP_SECONDS)
        time.sleep(HOLD_SECONDS)
        _set_offset(gate, 0)
        time.sleep(HOLD_SECONDS)
        added = time.monotonic()
        job.set_hosts(["127.0.0.1", "127.0.0.2"])
        job.wait_progress(0, size=2, timeout=20)
        grew = time.monotonic() - added
    finally:
        run = job.finish()
        _remove_faketime_shm(before)
    assert run.returncode == 0, run.tail()
    worlds = run.worlds()  # a misfire would have formed a world before the host was added
    assert len(worlds[1]) == 1 and [host for _, host in worlds[2]] == ["127.0.0.1", "127.0.0.2"], run.tail()
    assert "caught" not in run.output and "blacklisted" not in run.output, run.tail()
    stamps = [float(line.split()[0]) for line in calls.read_text().splitlines()]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    print(f"elastic discovery: {len(stamps)} runs, gaps {min(gaps):.2f}-{max(gaps):.2f} s; "
          f"host added to world of 2 in {grew:.2f} s")
    assert max(gaps) < DISCOVERY_SECONDS + 2.0 and min(gaps) > DISCOVERY_SECONDS / 2, gaps  # no stall, no burst
    assert grew < DISCOVERY_SECONDS + 10.0, grew
    clean(run)
