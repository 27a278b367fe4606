"""Real jobs under launchers that are not ring's own: torchrun and mpirun.

Each starts two workers of tests/cluster/train_worker.py, which train with
DistributedOptimizer and check their result against a single-process run on
the global batch and against each other. Rank 0 serves the rendezvous store.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from ring_strategy._contracts import job_shm_paths
from tests.jobs import job_environment, mpirun_command, run_job

WORKER = Path(__file__).with_name("train_worker.py")


def _environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment without launcher variables, this checkout on the path."""
    launcher = re.compile(r"^(RING_|OMPI_|PMIX?_|SLURM_|TORCHELASTIC_)|^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT)$")
    base = {k: v for k, v in os.environ.items() if not launcher.match(k)}
    return job_environment({"RING_START_TIMEOUT": "60", **(extra or {})}, base=base)


def _run(cmd: List[str], extra: Optional[Dict[str, str]] = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_job(cmd, env=_environment(extra), timeout=timeout)


def _torchrun(*args: str) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *args]


def _mpirun(*args: str) -> List[str]:
    return mpirun_command(2, *args)


def _check_trained(proc: subprocess.CompletedProcess, environment: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    jobs = set()
    for rank in range(2):
        match = re.search(rf"^{rank}: {environment} ok job (\S+)$", proc.stdout, re.M)
        assert match, out[-8000:]
        jobs.add(match.group(1))
    assert len(jobs) == 1, f"ranks disagree on the job id: {jobs}"
    job = jobs.pop()
    assert job.startswith(environment[: -len("Environment")].lower() + "-"), job
    assert not job_shm_paths(job), "shared memory left behind"


def test_torchrun_trains_two_workers():
    _check_trained(_run(_torchrun(str(WORKER), "TorchrunEnvironment")), "TorchrunEnvironment")


def test_mpirun_trains_two_workers():
    _check_trained(_run(_mpirun(sys.executable, str(WORKER), "MpirunEnvironment")), "MpirunEnvironment")


def test_mpirun_with_explicit_secret_and_port():
    """RING_SECRET and RING_RENDEZVOUS_PORT, exported to the ranks, are used instead of derived ones."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    extra = {"RING_SECRET": os.urandom(16).hex(), "RING_RENDEZVOUS_PORT": str(port)}
    cmd = _mpirun(sys.executable, "-c", (
        "import ring_strategy as rs; from ring_strategy.basics import _env; rs.init(); e = _env(); "
        "import os; assert e.secret.hex() == os.environ['RING_SECRET']; "
        "import sys; total = float(rs.allreduce([rs.rank() + 1.0], op=rs.Sum)[0]); "
        "sys.stdout.write(f'{rs.rank()} {e.rendezvous_address} {total}\\n')"))
    proc = _run(cmd, extra, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    assert sorted(proc.stdout.splitlines()) == [f"0 127.0.0.1:{port} 3.0", f"1 127.0.0.1:{port} 3.0"], proc.stdout


def test_process_started_by_an_mpi_singleton_is_a_world_of_one():
    """A process that initialised MPI without mpirun (Lightning's
    MPIEnvironment.detect() does where mpi4py is installed) leaves Open MPI's
    singleton variables in the environment its children inherit; a child
    that calls init() is a world of one, not a rank of an mpirun job."""
    pytest.importorskip("mpi4py")
    child = "import ring_strategy as rs; rs.init(); print('size', rs.size(), type(rs.basics._env()).__name__)"
    parent = ("from mpi4py import MPI; import subprocess, sys; assert MPI.COMM_WORLD.Get_size() == 1; "
              f"sys.exit(subprocess.run([sys.executable, '-c', {child!r}]).returncode)")
    proc = _run([sys.executable, "-c", parent], timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    assert proc.stdout.strip() == "size 1 LocalEnvironment", (proc.stdout + proc.stderr)[-8000:]


def test_torchrun_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = _run(_torchrun(str(WORKER), "TorchrunEnvironment"),
                    {"RING_RENDEZVOUS_PORT": str(port), "RING_START_TIMEOUT": "20"}, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-8000:]
    assert f"rank 0 cannot serve the rendezvous store on 127.0.0.1:{port}" in out, out[-8000:]
    assert "RING_RENDEZVOUS_PORT" in out, out[-8000:]
