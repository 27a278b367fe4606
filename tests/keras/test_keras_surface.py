"""The rest of horovod.keras' surface in keras_callbacks on two real workers
(ringrun -np 2), once per Keras backend: broadcast_object, allgather_object,
allreduce and reducescatter with Horovod's arguments, start_timeline /
stop_timeline, PartialDistributedOptimizer, Horovod's exceptions and build
queries.

One ringrun per backend runs every scenario of workers/keras_surface_worker.py
(importing TensorFlow or JAX is the slow part); each test then checks its
scenario's "<rank>: <scenario> ok" line on both ranks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "keras_surface_worker.py"
# torch: slow-marked for make test's budget (pytest -m slow), as in test_keras_fit.py.
BACKENDS = ["tensorflow", "jax", pytest.param("torch", marks=pytest.mark.slow)]
SCENARIOS = ["objects", "values", "timeline", "partial_optimizer", "exports"]
_runs: dict = {}


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("keras_surface")


def _run(run_output, backend: str, out_root: Path) -> str:
    """Output of the worker under ringrun -np 2 with this backend (run once)."""
    if backend not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
        env.update(KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        _runs[backend] = run_output(2, [sys.executable, str(WORKER), str(out_root), *SCENARIOS], env=env, timeout=180)
    return _runs[backend]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_scenario(backend, scenario, out_root, run_output):
    out = _run(run_output, backend, out_root)
    assert {"0", "1"} <= set(passed_ranks(out, scenario)), f"{backend}/{scenario}:\n{out[-8000:]}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_code(backend, out_root, run_output):
    out = _run(run_output, backend, out_root)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
