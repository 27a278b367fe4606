"""Running elastic ``ringrun`` jobs of ``elastic_train.py`` and reading what they print.

A job runs through :mod:`tests.jobs` with ``-v`` (its first line names the
job id) and a discovery script that prints a hosts file the test may
rewrite while the job runs (:meth:`ElasticJob.set_hosts`), timed by the
progress file rank 0 rewrites after each step (:meth:`ElasticJob.wait_progress`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ring_strategy._contracts import job_shm_paths
from tests.jobs import JobResult, finish_job, job_environment, ringrun_command, start_job

__all__ = ["DETECT_SECONDS", "RECOVER_SECONDS", "ElasticJob", "Finished", "WORKER", "clean", "timings"]

WORKER = Path(__file__).resolve().parent / "elastic_train.py"
_JOB = re.compile(r"^ringrun: job ([0-9a-f]+):", re.M)
_WORLD = re.compile(r"^ringrun: world (\d+): (.*)$", re.M)
_MEMBER = re.compile(r"rank (\d+) = worker (\d+) on ([^\s,]+)")
_STARTED = re.compile(r"^ringrun: started worker (\d+) on (\S+) \(pid (\d+)\)$", re.M)
_JOINED = re.compile(r"^\[\d+\] world (\d+) worker (\d+) pid (\d+) rank (\d+) size (\d+) at ([\d.]+)$", re.M)
_SYNCED = re.compile(r"^\[(\d+)\] synced world (\d+) rank (\d+) step (\d+) params ([0-9a-f]+)$", re.M)
_DONE = re.compile(r"^\[\d+\] done worker (\d+) rank (\d+) steps (\d+) params ([0-9a-f]+)$", re.M)
_CAUGHT = re.compile(r"^\[(\d+)\] caught (\w+) at ([\d.]+)$", re.M)
_FIRST = re.compile(r"^\[(\d+)\] first step world (\d+) at ([\d.]+)$", re.M)
_VICTIM = re.compile(r"^\[\d+\] victim worker (\w+) pid (\d+) failing at ([\d.]+)$", re.M)


def params(hex_text: str) -> np.ndarray:
    """Parameters printed as the hex of their float32 bytes."""
    return np.frombuffer(bytes.fromhex(hex_text), np.float32)


@dataclass
class Finished:
    """What a finished elastic job printed, and what it left behind."""

    result: JobResult
    seconds: float
    leftover_processes: List[str]
    leftover_segments: List[str]

    @property
    def returncode(self) -> int:
        return self.result.returncode

    @property
    def output(self) -> str:
        return self.result.output

    def tail(self, n: int = 6000) -> str:
        return f"[ringrun exit code {self.returncode} after {self.seconds:.1f} s]\n{self.output[-n:]}"

    def worlds(self) -> Dict[int, List[Tuple[int, str]]]:
        """Each world the driver formed: ``(worker, host)`` in rank order."""
        return {int(m[1]): [(int(w), h) for _, w, h in _MEMBER.findall(m[2])] for m in _WORLD.finditer(self.output)}

    def started(self) -> Dict[int, Tuple[str, int]]:
        """Each worker the driver started: its host and pid."""
        return {int(m[1]): (m[2], int(m[3])) for m in _STARTED.finditer(self.output)}

    def joined(self) -> List[Dict[str, float]]:
        """Each ``world G worker N pid P rank R size S at T`` line."""
        keys = ("world", "worker", "pid", "rank", "size")
        return [dict(zip(keys, map(int, m.groups()[:5])), at=float(m[6])) for m in _JOINED.finditer(self.output)]

    def synced(self, world: int) -> Dict[int, str]:
        """The parameters (hex) each rank held after the sync of ``world``, by rank."""
        return {int(m[3]): m[5] for m in _SYNCED.finditer(self.output) if int(m[2]) == world}

    def synced_steps(self, world: int) -> Dict[int, int]:
        """The step each rank resumed from after the sync of ``world``, by rank."""
        return {int(m[3]): int(m[4]) for m in _SYNCED.finditer(self.output) if int(m[2]) == world}

    def done(self) -> Dict[int, Tuple[int, int, str]]:
        """Each finished worker's rank, step count and parameters (hex), by worker."""
        return {int(m[1]): (int(m[2]), int(m[3]), m[4]) for m in _DONE.finditer(self.output)}

    def victim_at(self) -> float:
        m = _VICTIM.search(self.output)
        assert m is not None, self.tail()
        return float(m[3])

    def caught(self) -> Dict[int, Tuple[str, float]]:
        """The first error each worker caught (by its output prefix): class and time."""
        found: Dict[int, Tuple[str, float]] = {}
        for m in _CAUGHT.finditer(self.output):
            found.setdefault(int(m[1]), (m[2], float(m[3])))
        return found

    def first_steps(self, world: int) -> Dict[int, float]:
        """When each worker made its first step in ``world`` after a reset."""
        return {int(m[1]): float(m[3]) for m in _FIRST.finditer(self.output) if int(m[2]) == world}


class ElasticJob:
    """One elastic job of ``elastic_train.py`` (or ``worker``) under ``ringrun``.

    Args:
        directory: Where the hosts and progress files go.
        hosts: The hosts the discovery script lists at first (None: the job
            gives its own ``-H``).
        args: ringrun's further arguments (``-np``, ``--min-np``, ...).
        env: Variables for the job (``TRAIN_*``).
        worker: The worker script (``elastic_train.py`` by default); another
            one takes the same ``TRAIN_PROGRESS`` and TAG arguments.
        prefix: What ringrun's command line starts with (e.g. ``ip netns exec HOST``).
        worker_prefix: What each worker's command line starts with (e.g. ``env -u VAR``).
    """

    def __init__(self, directory: Path, hosts: Optional[Sequence[str]], args: Sequence[object],
                 env: Optional[Dict[str, str]] = None, worker: Path = WORKER, prefix: Sequence[str] = (),
                 worker_prefix: Sequence[str] = ()) -> None:
        self.hosts_file = directory / "hosts"
        self.progress_file = directory / "progress"
        self.tag = f"elastic-{uuid.uuid4().hex[:12]}"
        discovery: List[object] = []
        if hosts is not None:
            self.set_hosts(hosts)
            discovery = ["--host-discovery-script", f"cat {shlex.quote(str(self.hosts_file))}"]
        cmd = [*prefix, *ringrun_command(None, ["-v", *discovery, *args, *worker_prefix, sys.executable, worker,
                                                             self.tag])]
        variables = {"TRAIN_PROGRESS": str(self.progress_file), **(env or {})}
        self.started_at = time.monotonic()
        self.proc = start_job(cmd, env=job_environment(variables), merge_output=True)

    def set_hosts(self, hosts: Sequence[str]) -> None:
        """Rewrites what the discovery script prints (at once, as one file)."""
        tmp = self.hosts_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{h}\n" for h in hosts))
        os.replace(tmp, self.hosts_file)

    def wait_progress(self, step: int, size: Optional[int] = None, timeout: float = 60.0) -> None:
        """Waits until rank 0 has made ``step`` steps (in a world of ``size`` ranks, if given)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                done, ranks = map(int, self.progress_file.read_text().split())
            except (OSError, ValueError):
                done, ranks = -1, -1
            if done >= step and (size is None or ranks == size):
                return
            time.sleep(0.05)
        result = finish_job(self.proc, 0.1, fail_on_timeout=False, grace=5.0)
        raise AssertionError(f"rank 0 did not reach step {step} (size {size}) in {timeout:g} s:\n{result.output[-6000:]}")

    def finish(self, timeout: float = 90.0) -> Finished:
        """Waits for the job's end; then looks for what it left behind."""
        result = finish_job(self.proc, timeout)
        seconds = time.monotonic() - self.started_at
        run = Finished(result, seconds, [], [])
        m = _JOB.search(result.output)
        run.leftover_segments = job_shm_paths(m[1]) if m else ["(no job id printed)"]
        # Workers on other hosts (namespace hosts share this process table) print their pid.
        pids = {pid for _, pid in run.started().values()} | {j["pid"] for j in run.joined()}
        run.leftover_processes = _still_alive(sorted(pids), self.tag)
        return run


def _still_alive(pids: Sequence[int], tag: str, seconds: float = 5.0) -> List[str]:
    """Those of ``pids`` that still run this job's worker, after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if tag in cmdline and state != "Z":
                left.append(f"pid {pid}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# The limits: a lost peer detected within 10 s, the first step after a reset within 15 s.
DETECT_SECONDS = 10.0
RECOVER_SECONDS = 15.0


def timings(run: Finished, survivors: Sequence[int], world: int, what: str,
            error: str = "PeerFailureError", detect_within: float = DETECT_SECONDS,
            recover_within: float = RECOVER_SECONDS) -> Tuple[float, float]:
    """Prints and checks detection (failure to the survivors' exception, an
    ``error``) and recovery (failure to their first step in ``world``) times."""
    failed_at = run.victim_at()
    caught, first = run.caught(), run.first_steps(world)
    assert set(survivors) <= set(caught) and set(survivors) <= set(first), run.tail()
    detect = max(caught[s][1] for s in survivors) - failed_at
    recover = max(first[s] for s in survivors) - failed_at
    print(f"{what}: detection {detect:.3f} s, recovery (first step of world {world}) {recover:.3f} s")
    assert {caught[s][0] for s in survivors} == {error}, caught
    assert detect < detect_within and recover < recover_within, run.tail()
    return detect, recover


def clean(run: Finished) -> None:
    """No worker process and no shared-memory name of the job is left."""
    assert run.leftover_processes == [], f"{run.leftover_processes}\n{run.tail()}"
    assert run.leftover_segments == [], run.leftover_segments
