"""The suite's job launcher (tests/jobs.py): a job that outlives its timeout
is stopped, workers that ignore SIGTERM and what they started included."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from tests.jobs import finish_job, job_environment, ringrun_command, start_job

# Each worker ignores SIGTERM, starts a child in a session of its own that
# ignores it too, prints both pids and sleeps.
STUBBORN = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
        start_new_session=True)
    print("pids", os.getpid(), child.pid, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_timeout_stops_the_whole_job() -> None:
    proc = start_job(ringrun_command(2, ["--grace-period", "30", sys.executable, "-c", STUBBORN]),
                     env=job_environment(drop_ring=True), merge_output=True)
    result = finish_job(proc, timeout=3, fail_on_timeout=False, grace=1)
    assert result.timed_out and result.leftover == [], result.stdout
    assert result.stdout.rstrip().endswith("after 3 s: SIGTERM, then SIGKILL]"), result.stdout
    pids = [int(p) for line in re.findall(r"pids (\d+) (\d+)", result.stdout) for p in line]
    assert len(pids) == 4, result.stdout
    assert not [p for p in pids if _alive(p)], result.stdout


def test_timeout_fails_the_test_with_the_output() -> None:
    proc = start_job([sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"])
    with pytest.raises(pytest.fail.Exception, match=r"(?s)started.*the test stopped .* after 2 s: SIGTERM"):
        finish_job(proc, timeout=2, grace=1)
