"""TensorFlow 1-style scripts (tf.compat.v1, eager execution disabled) on two
real workers (ringrun -np 2): one ringrun runs every scenario of
workers/tf1_worker.py; each test checks its "<rank>: <scenario> ok" line on
both ranks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "tf1_worker.py"
SCENARIOS = ["v1_session", "v1_monitored", "v1_aggregation", "v1_local_var", "build_queries", "v1_errors"]
_runs: dict = {}


def _run(run_output) -> str:
    if "out" not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        _runs["out"] = run_output(2, [sys.executable, str(WORKER), *SCENARIOS], env=env, timeout=180)
    return _runs["out"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, run_output):
    out = _run(run_output)
    assert {"0", "1"} <= set(passed_ranks(out, scenario)), f"{scenario}:\n{out[-8000:]}"


def test_exit_code(run_output):
    out = _run(run_output)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
