"""ringrun inside the namespace hosts of ``netns.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from .netns import Cluster

REPO_ROOT = Path(__file__).resolve().parents[2]


def ringrun_command(cluster: Cluster, args: List[str]) -> List[str]:
    """``ringrun -i KEY ARGS...`` as this interpreter runs it."""
    return [sys.executable, "-m", "ring_strategy.runner.launch", "-i", str(cluster.key), *args]


def ringrun_environment(cluster: Cluster, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's variables, the checkout on PYTHONPATH, the cluster's ssh options and ``extra``."""
    env = dict(os.environ, **cluster.ringrun_env(), **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def ringrun_in(cluster: Cluster, host: int, args: List[str], timeout: float = 120,
               env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Runs ringrun in namespace host ``host`` from the repository root; returns its result."""
    cmd = [*cluster.exec_prefix(host), *ringrun_command(cluster, args)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=ringrun_environment(cluster, env))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"ringrun {' '.join(args)} timed out after {timeout:g} s\n"
                    f"--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}", pytrace=False)


def start_ringrun_in(cluster: Cluster, host: int, args: List[str]) -> subprocess.Popen:
    """Starts ringrun in namespace host ``host``; the caller waits for it."""
    return subprocess.Popen(
        [*cluster.exec_prefix(host), *ringrun_command(cluster, args)], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
        cwd=REPO_ROOT, env=ringrun_environment(cluster),
    )
