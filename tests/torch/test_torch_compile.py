"""ring_strategy.torch under torch.compile(fullgraph=True) on two real
workers (ringrun -np 2): the collectives are custom operators
(ring_strategy/torch/custom_ops.py), so a step that calls them compiles into
one graph with no break, and computes what the eager calls compute.

One ringrun runs every scenario of workers/torch_compile.py; each test then
checks its scenario's "<rank>: <scenario> ok" line on both ranks. Inductor's
first compilation on two cores is the slow part (about 30 s with a cold
cache, a few seconds with a warm one).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "torch_compile.py"
SCENARIOS = ["step", "optimizer", "ops", "inplace", "opcheck", "names", "errors"]
_runs = {}


def _run(run_output) -> str:
    """Output of every scenario at np=2 (run once per module)."""
    if "out" not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
        env.update(OMP_NUM_THREADS="1")
        _runs["out"] = run_output(2, [sys.executable, str(WORKER), *SCENARIOS], env=env, timeout=240)
    return _runs["out"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, run_output):
    out = _run(run_output)
    assert len(passed_ranks(out, scenario)) == 2, f"{scenario}:\n{out[-8000:]}"


def test_workers_exit_cleanly(run_output):
    out = _run(run_output)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
    assert "FAILED" not in out, out[-8000:]


def test_import_does_not_load_dynamo():
    """Registering the operators must not import torch._dynamo (a second of
    start-up in every worker); Dynamo comes with the first torch.compile."""
    code = "import sys, ring_strategy.torch; assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
