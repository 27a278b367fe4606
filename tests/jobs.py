"""The one way the suite starts a job: ringrun, or a command that starts its
own workers (a self-launched Lightning script, torchrun, mpirun).

Every job runs in a session of its own with this checkout first on
``PYTHONPATH`` and stdin on /dev/null. A job that outlives its timeout is
stopped the same way everywhere: SIGTERM to the command (ringrun then stops
its workers), and after :data:`GRACE_SECONDS` SIGKILL to the command's
session and to every process it had started (ringrun starts each worker in a
session of its own); the job's processes are then checked to be gone, and
any still there is named in the result.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Seconds between SIGTERM and SIGKILL when a job outlives its timeout.
GRACE_SECONDS = 20.0
# Seconds to wait for the output pipes to close once everything was killed.
_DRAIN_SECONDS = 10.0

_Process = Tuple[int, str]  # pid and start time: a pid alone may be reused


class JobResult(subprocess.CompletedProcess):
    """A finished job: ``args``, ``returncode``, ``stdout``, ``stderr``
    (empty when merged into ``stdout``), and whether it was stopped."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str, timed_out: bool,
                 leftover: List[str]) -> None:
        super().__init__(list(args), returncode, stdout, stderr)
        self.timed_out = timed_out
        #: Processes of the job that were still there after it was stopped.
        self.leftover = leftover

    @property
    def output(self) -> str:
        """stdout and stderr together."""
        return self.stdout + self.stderr


def ringrun_command(np: Optional[int], args: Sequence[object]) -> List[str]:
    """``ringrun [-np NP] ARGS...`` as this interpreter runs it (``python -m
    ring_strategy.runner.launch``); no ``-np`` when ``np`` is None."""
    head = [sys.executable, "-m", "ring_strategy.runner.launch"]
    return head + ([] if np is None else ["-np", str(np)]) + [str(a) for a in args]


def mpirun_command(np: int, *args: object) -> List[str]:
    """``mpirun -np N args...``, as root too (``--allow-run-as-root``), with
    ``--oversubscribe`` so that workers may share fewer cores. Fails the test
    when mpirun is missing as root (``make sysdeps`` installs it); skips it
    otherwise."""
    import shutil

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        if os.geteuid() == 0:
            pytest.fail("mpirun is missing: run `make sysdeps` (installs openmpi-bin)", pytrace=False)
        pytest.skip("mpirun is missing and installing openmpi-bin needs root: apt-get install openmpi-bin")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [mpirun, *root, "--oversubscribe", "-np", str(np), *map(str, args)]


def job_environment(env: Optional[Mapping[str, str]] = None, *, base: Optional[Mapping[str, str]] = None,
                    drop_ring: bool = False) -> Dict[str, str]:
    """``base`` (this process's environment by default), less its ``RING_*``
    variables when ``drop_ring``, with ``env`` on top and this checkout first
    on ``PYTHONPATH``."""
    full = {k: v for k, v in (os.environ if base is None else base).items()
            if not (drop_ring and k.startswith("RING_"))}
    full.update(env or {})
    parts = [str(REPO_ROOT)] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p]
    full["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return full


def start_job(cmd: Sequence[object], *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[os.PathLike] = None, merge_output: bool = False) -> subprocess.Popen:
    """Starts ``cmd`` in its own session; finish it with :func:`finish_job`.

    Args:
        cmd: The argv.
        env: The whole environment (see :func:`job_environment`); by default
            this process's, with this checkout first on ``PYTHONPATH``.
        cwd: The working directory; the repository root by default.
        merge_output: Whether stderr goes to stdout.
    """
    return subprocess.Popen(
        [str(c) for c in cmd], env=dict(env) if env is not None else job_environment(),
        cwd=str(cwd or REPO_ROOT), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True, errors="replace",
        start_new_session=True,
    )


def finish_job(proc: subprocess.Popen, timeout: float, *, fail_on_timeout: bool = True,
               grace: float = GRACE_SECONDS) -> JobResult:
    """Waits up to ``timeout`` seconds for a job from :func:`start_job`.

    On timeout the job is stopped (see the module's docstring). Then, with
    ``fail_on_timeout``, the test fails with what the job printed; otherwise
    the result is returned with ``timed_out`` set and a last line of stdout
    saying so (for jobs whose output several tests read). ``grace`` is
    the time between SIGTERM and SIGKILL.
    """
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err, leftover = _stop(proc, grace)
        note = (f"\n[the test stopped {shlex.join(proc.args)} after {timeout:g} s: SIGTERM, then SIGKILL"
                f"{'; still there after SIGKILL: ' + ', '.join(leftover) if leftover else ''}]\n")
        result = JobResult(proc.args, proc.returncode, (out or "") + note, err or "", True, leftover)
        if fail_on_timeout:
            pytest.fail(f"{result.stdout[-8000:]}\n--- stderr ---\n{result.stderr[-8000:]}", pytrace=False)
        return result
    return JobResult(proc.args, proc.returncode, out or "", err or "", False, [])


def run_job(cmd: Sequence[object], *, env: Optional[Mapping[str, str]] = None, cwd: Optional[os.PathLike] = None,
            timeout: float = 120, merge_output: bool = False, fail_on_timeout: bool = True) -> JobResult:
    """Runs ``cmd`` to its end: :func:`start_job`, then :func:`finish_job`."""
    proc = start_job(cmd, env=env, cwd=cwd, merge_output=merge_output)
    return finish_job(proc, timeout, fail_on_timeout=fail_on_timeout)


def run_ringrun(np: Optional[int], args: Sequence[object], env: Optional[Mapping[str, str]] = None,
                timeout: float = 120, cwd: Optional[os.PathLike] = None, *, base: Optional[Mapping[str, str]] = None,
                drop_ring: bool = False, merge_output: bool = False, fail_on_timeout: bool = True) -> JobResult:
    """Runs ``ringrun -np NP ARGS...`` to its end.

    Args:
        np: Number of workers (None: no ``-np``, e.g. ``--check-build``).
        args: ringrun's further options and the worker command, e.g.
            ``[sys.executable, "-c", "print(1)"]``.
        env: Variables set on top of ``base``.
        timeout: Seconds before the job is stopped.
        cwd: Working directory; the repository root by default.
        base: The environment to start from; this process's by default.
        drop_ring: Leave out ``base``'s ``RING_*`` variables.
        merge_output: Whether stderr goes to stdout.
        fail_on_timeout: See :func:`finish_job`.
    """
    return run_job(ringrun_command(np, args), env=job_environment(env, base=base, drop_ring=drop_ring), cwd=cwd,
                   timeout=timeout, merge_output=merge_output, fail_on_timeout=fail_on_timeout)


# ---------------------------------------------------------------- stopping
def _stop(proc: subprocess.Popen, grace: float) -> Tuple[str, str, List[str]]:
    """SIGTERM, then SIGKILL to everything the job started; returns its output
    and the processes that outlived even that."""
    seen = _descendants(proc.pid)
    _signal(proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        seen |= _descendants(proc.pid)
        _kill_all(proc.pid, seen)
        try:
            out, err = proc.communicate(timeout=_DRAIN_SECONDS)
        except subprocess.TimeoutExpired:  # a pipe held open by a process we cannot see
            out, err = "", "[output lost: the job's pipes stayed open]"
    _kill_all(None, seen)  # workers that ignored ringrun's own SIGTERM, SIGKILL
    return out, err, _still_there(seen)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _kill_all(session: Optional[int], processes: Set[_Process]) -> None:
    """SIGKILL to ``session`` (a process group id) and to each of ``processes``' groups."""
    groups = {session} if session is not None else set()
    for pid, started in processes:
        if _start_time(pid) == started:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                continue
            _signal(pid, signal.SIGKILL)
    for group in groups - {os.getpgid(0)}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _still_there(processes: Set[_Process], seconds: float = 5.0) -> List[str]:
    deadline = time.monotonic() + seconds
    while True:
        left = [f"pid {pid}" for pid, started in sorted(processes) if _start_time(pid) == started]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _stat(pid: int) -> Optional[List[str]]:
    """The fields of /proc/PID/stat after the command name, or None (gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields


def _start_time(pid: int) -> Optional[str]:
    fields = _stat(pid)
    return None if fields is None else fields[19]


def _descendants(root: int) -> Set[_Process]:
    """The live processes below ``root``, ``root`` included."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: Set[_Process] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        started = _start_time(pid)
        if started is not None:
            found.add((pid, started))
            todo.extend(children.get(pid, []))
    return found
