"""Shared pytest fixtures.

``ringrun`` runs the launcher as a real process, so multi-process tests launch
real workers exactly as users do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _with_repo_on_path(env: Dict[str, str]) -> Dict[str, str]:
    """Lets ringrun and its workers import ring_strategy from this checkout."""
    parts = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def run_ringrun(
    np: int,
    args: List[str],
    env: Optional[Dict[str, str]] = None,
    timeout: float = 120,
    cwd: Optional[os.PathLike] = None,
) -> subprocess.CompletedProcess:
    """Runs ``ringrun -np NP ARGS...`` and returns its result.

    ringrun runs as ``python -m ring_strategy.runner.launch`` with this
    interpreter, this checkout on ``PYTHONPATH`` and the repository root as the
    working directory. On timeout ringrun gets SIGTERM first, so that it stops
    its workers, and the test fails with what it printed.

    Args:
        np: Number of workers.
        args: ringrun's further options and the worker command, e.g.
            ``[sys.executable, "-c", "print(1)"]``.
        env: Variables set on top of this process's environment.
        timeout: Seconds before ringrun is stopped and the test fails.
        cwd: Working directory; the repository root by default.

    Returns:
        The completed process, with ``stdout`` and ``stderr`` as text.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env = _with_repo_on_path(full_env)
    cmd = [sys.executable, "-m", "ring_strategy.runner.launch", "-np", str(np), *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        env=full_env, cwd=str(cwd or REPO_ROOT), text=True, errors="replace",
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(
            f"ringrun -np {np} {' '.join(args)} timed out after {timeout:g} s\n"
            f"--- stdout ---\n{out}\n--- stderr ---\n{err}",
            pytrace=False,
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def ringrun_output(np: int, args: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 240) -> str:
    """Runs ``ringrun -np NP ARGS...`` and returns its stdout and stderr
    together, headed by ``[ringrun exit code N]``.

    Unlike :func:`run_ringrun` a timeout does not fail the test by itself: ringrun
    gets SIGTERM (it stops its workers) and the output ends with a line saying
    so, for tests that read one long run's output from several test functions.

    Args:
        np: Number of workers.
        args: The worker command, e.g. ``[sys.executable, "worker.py"]``.
        env: The whole environment (this checkout is added to PYTHONPATH);
            this process's environment when None.
        timeout: Seconds before ringrun is stopped.
    """
    full_env = _with_repo_on_path(dict(os.environ if env is None else env))
    cmd = [sys.executable, "-m", "ring_strategy.runner.launch", "-np", str(np), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=full_env, cwd=str(REPO_ROOT), text=True, errors="replace")
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # ringrun stops its workers
        out, _ = proc.communicate()
        out += f"\n[timed out after {timeout:g} s]"
    return f"[ringrun exit code {proc.returncode}]\n{out}"


@pytest.fixture(scope="session")
def run_output() -> Callable[..., str]:
    """The function :func:`ringrun_output`."""
    return ringrun_output


@pytest.fixture
def ringrun() -> Callable[..., subprocess.CompletedProcess]:
    """The function :func:`run_ringrun`: ``ringrun(np, args, env=None, timeout=120)``."""
    return run_ringrun
