"""ring_strategy.tensorflow on two real workers (ringrun -np 2).

One ringrun runs every scenario of workers/tf_worker.py in sequence
(importing TensorFlow is the slow part); each test then checks its
scenario's "<rank>: <scenario> ok" line on both ranks. The scenarios run
through the op library ("native") and through the forced host-call
fallback (RING_NATIVE_OPS=0, "host").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "tf_worker.py"
SCENARIOS = ["eager_ops", "function_ops", "gradients", "broadcast_helpers", "errors", "gradient_tape", "optimizer_eager",
             "adasum_allreduce", "adasum_gradient", "adasum_errors"]
_runs: dict = {}


def _run(run_output, path: str = "native") -> str:
    if path not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        if path == "host":
            env["RING_NATIVE_OPS"] = "0"
        _runs[path] = run_output(2, [sys.executable, str(WORKER), *SCENARIOS], env=env, timeout=180)
    return _runs[path]


# The host-call path (RING_NATIVE_OPS=0, the fallback without a compiler): slow-marked for
# make test's budget (pytest -m slow); in make test, test_keras_fit.py's tensorflow-host covers that path.
PATHS = ["native", pytest.param("host", marks=pytest.mark.slow)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, path, run_output):
    out = _run(run_output, path)
    assert {"0", "1"} <= set(passed_ranks(out, scenario)), f"{scenario}:\n{out[-8000:]}"


@pytest.mark.parametrize("path", PATHS)
def test_exit_code(path, run_output):
    out = _run(run_output, path)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
