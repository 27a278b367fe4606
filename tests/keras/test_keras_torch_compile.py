"""Keras 3 on the torch backend with jit_compile=True (torch.compile) and
ring's DistributedOptimizer, on two real workers (ringrun -np 2): the
reduction is a custom operator in the compiled graph
(keras_callbacks/optimizer.py's _torch_allreduce), and the fit trains what
jit_compile=False trains.

One ringrun runs every check of workers/torch_compile_worker.py; each test
then checks its "<rank>: <check> ok" line on both ranks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

# 30 s of make test's budget: slow-marked (pytest -m slow); tests/torch/test_torch_compile.py
# keeps torch.compile(fullgraph=True) over ring's collectives in make test.
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "torch_compile_worker.py"
CHECKS = ["reduce_op", "fit", "fit_breaks"]
_runs: dict = {}


def _run(run_output) -> str:
    """Output of the worker under ringrun -np 2 (run once per module)."""
    if "out" not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
        env.update(KERAS_BACKEND="torch", TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        _runs["out"] = run_output(2, [sys.executable, str(WORKER), *CHECKS], env=env, timeout=240)
    return _runs["out"]


@pytest.mark.parametrize("check", ["reduce_op", "fit"])
def test_check(check, run_output):
    out = _run(run_output)
    assert {"0", "1"} <= set(passed_ranks(out, check)), f"{check}:\n{out[-8000:]}"


def test_no_graph_break_in_ring_code(run_output):
    out = _run(run_output)
    assert {"0", "1"} <= set(passed_ranks(out, "fit_breaks")), out[-8000:]


def test_exit_code(run_output):
    out = _run(run_output)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
