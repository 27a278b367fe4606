"""ring_strategy.mxnet: collectives, DistributedTrainer, DistributedOptimizer
and broadcast_parameters on real workers (ringrun), training equal to one
process on the global batch.

MXNet 1.9.1 needs numpy older than 1.24, so it lives in a virtualenv of its
own: ``make mxnet-test`` creates it and runs this file there. In any other
environment (the main .venv of ``make test``) the file is skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mxnet")

from tests.jobs import REPO_ROOT, job_environment, run_job, run_ringrun  # noqa: E402

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))
import mxnet_scenarios  # noqa: E402  (for its scenario names)

SCENARIO = [sys.executable, WORKERS / "mxnet_scenarios.py"]


def _check(proc: subprocess.CompletedProcess, name: str, ranks: int) -> None:
    for r in range(ranks):
        assert re.search(rf"^(\[{r}\] )?{r}: {name} ok$", proc.stdout, re.M), (proc.stdout + proc.stderr)[-8000:]


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"np{n}")
def job(request):
    n = request.param
    if n == 1:  # plain python, no launcher: a world of one
        return n, run_job(SCENARIO, env=job_environment(drop_ring=True), timeout=180)
    return n, run_ringrun(n, SCENARIO, timeout=180, drop_ring=True)


@pytest.mark.parametrize("name", list(mxnet_scenarios.SCENARIOS))
def test_scenario(job, name):
    ranks, proc = job
    _check(proc, name, ranks)


def test_exit_code(job):
    _, proc = job
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]


def test_every_module_imports_alone():
    modules = sorted(
        ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (REPO_ROOT / "ring_strategy" / "mxnet").glob("*.py")
    )
    assert "ring_strategy.mxnet.optimizer" in modules, modules
    for module in modules:
        proc = run_job([sys.executable, "-c", f"import {module}"], env=job_environment(), timeout=120)
        assert proc.returncode == 0, f"{module}: {proc.stderr[-3000:]}"
