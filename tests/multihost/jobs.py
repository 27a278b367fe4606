"""ringrun inside the namespace hosts of ``netns.py``, started through :mod:`tests.jobs`."""

from __future__ import annotations

import subprocess
from typing import Dict, List, Optional

from tests.jobs import REPO_ROOT, JobResult, job_environment, ringrun_command, run_job, start_job

from .netns import Cluster

__all__ = ["REPO_ROOT", "ringrun_in", "start_ringrun_in"]


def _command(cluster: Cluster, host: int, args: List[str]) -> List[str]:
    """``ringrun -i KEY ARGS...`` in namespace host ``host``."""
    return [*cluster.exec_prefix(host), *ringrun_command(None, ["-i", str(cluster.key), *args])]


def _environment(cluster: Cluster, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's variables, the checkout on PYTHONPATH, the cluster's ssh options and ``extra``."""
    return job_environment({**cluster.ringrun_env(), **(extra or {})})


def ringrun_in(cluster: Cluster, host: int, args: List[str], timeout: float = 120,
               env: Optional[Dict[str, str]] = None) -> JobResult:
    """Runs ringrun in namespace host ``host`` from the repository root; returns its result."""
    return run_job(_command(cluster, host, args), env=_environment(cluster, env), timeout=timeout)


def start_ringrun_in(cluster: Cluster, host: int, args: List[str],
                     env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    """Starts ringrun in namespace host ``host``; the caller signals and waits for it."""
    return start_job(_command(cluster, host, args), env=_environment(cluster, env))
