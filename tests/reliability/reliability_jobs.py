"""Running real ``ringrun`` jobs for the reliability tests (through
:mod:`tests.jobs`) and checking what they leave behind.

A job runs ``ringrun -v`` (its first line names the job id, which names the
job's shared-memory segments) with a unique tag appended to the worker's
arguments, so that processes left behind can be found by their command line
without confusing them with other jobs on the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ring_strategy._contracts import job_shm_paths
from tests.jobs import finish_job, job_environment, ringrun_command, start_job

__all__ = ["WORKERS", "Caught", "JobResult", "finish", "job_environment", "run_job", "start_job_tagged"]

WORKERS = Path(__file__).resolve().parent / "workers"
_JOB_LINE = re.compile(r"^ringrun: job ([0-9a-f]+):", re.M)
_CAUGHT = re.compile(r"^\[(\d+)\] rank (\d+) caught (\w+) at ([\d.]+): (.*)$", re.M)
_VICTIM = re.compile(r"^\[(\d+)\] victim (\d+) pid (\d+) failing at ([\d.]+)(?: in flight (True|False))?$", re.M)


@dataclass
class Caught:
    """One rank's report of the error it caught: ``rank R caught CLS at T: MSG``."""

    rank: int
    cls: str
    at: float
    message: str


@dataclass
class JobResult:
    """What a finished job printed and left behind."""

    returncode: int
    output: str
    job_id: Optional[str]
    leftover_processes: List[str] = field(default_factory=list)
    leftover_segments: List[str] = field(default_factory=list)

    def caught(self) -> Dict[int, Caught]:
        """The ``rank R caught ...`` lines, by rank."""
        return {
            int(m[2]): Caught(int(m[2]), m[3], float(m[4]), m[5]) for m in _CAUGHT.finditer(self.output)
        }

    def victim(self) -> Optional[Dict[str, float]]:
        """The ``victim R pid P failing at T [in flight B]`` line as {rank,
        pid, at, in_flight}, if printed."""
        m = _VICTIM.search(self.output)
        if m is None:
            return None
        return {"rank": int(m[2]), "pid": int(m[3]), "at": float(m[4]), "in_flight": m[5] == "True"}

    def tail(self, n: int = 6000) -> str:
        """The end of the output, for assertion messages."""
        return f"[ringrun exit code {self.returncode}]\n{self.output[-n:]}"


def processes_with(tag: str) -> List[str]:
    """Command lines of live processes whose command line contains ``tag``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


def wait_gone(tag: str, seconds: float = 5.0) -> List[str]:
    """Waits up to ``seconds`` for the processes tagged ``tag`` to exit; returns those left."""
    deadline = time.monotonic() + seconds
    while True:
        left = processes_with(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def finish(proc: subprocess.Popen, tag: str, timeout: float) -> JobResult:
    """Waits for a job from :func:`start_job_tagged` and collects what it left behind.

    On timeout the job is stopped as every job of the suite is
    (:func:`tests.jobs.finish_job`); the output then ends with a line saying
    so, and the caller's assertions fail on it.
    """
    done = finish_job(proc, timeout, fail_on_timeout=False)
    m = _JOB_LINE.search(done.stdout)
    job_id = m[1] if m else None
    segments = [os.path.basename(p) for p in job_shm_paths(job_id)] if job_id else []
    return JobResult(done.returncode, done.stdout, job_id, wait_gone(tag), segments)


def start_job_tagged(np_: int, worker_args: Sequence[object], env: Optional[Dict[str, str]] = None,
                     grace: float = 5.0) -> Tuple[subprocess.Popen, str]:
    """Starts ``ringrun -v -np N --grace-period G python WORKER_ARGS... TAG``
    (stdout and stderr merged); returns the process and TAG."""
    tag = f"reliability-tag-{uuid.uuid4().hex[:12]}"
    args = ["-v", "--grace-period", f"{grace:g}", sys.executable, *worker_args, tag]
    return start_job(ringrun_command(np_, args), env=job_environment(env), merge_output=True), tag


def run_job(np_: int, worker_args: Sequence[object], env: Optional[Dict[str, str]] = None,
            timeout: float = 120, grace: float = 5.0) -> JobResult:
    """Runs a job to its end; see :func:`start_job_tagged` and :func:`finish`."""
    proc, tag = start_job_tagged(np_, worker_args, env, grace)
    return finish(proc, tag, timeout)
