"""ring_strategy.torch collectives on real worker processes launched by ringrun.

One ringrun per world size runs every scenario of workers/torch_ops.py in
sequence (starting torch in each worker is the slow part); each test then
checks its scenario's "<rank>: <scenario> ok" line on every rank.
"""

import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "torch_ops.py"
SCENARIOS = ["allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "grads",
             "compression", "errors", "deprecation", "misc"]
SIZES = [1, 2, 3]
_runs = {}


def _run_all(run_output, np_: int) -> str:
    """Output of every scenario at world size np_ (run once per module)."""
    if np_ not in _runs:
        _runs[np_] = run_output(np_, [sys.executable, str(WORKER), *SCENARIOS], timeout=240)
    return _runs[np_]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("np_", SIZES)
def test_scenario(np_, scenario, run_output):
    out = _run_all(run_output, np_)
    assert len(passed_ranks(out, scenario)) == np_, f"{scenario} at np={np_}:\n{out[-8000:]}"


@pytest.mark.parametrize("np_", SIZES)
def test_workers_exit_cleanly(np_, run_output):
    out = _run_all(run_output, np_)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
    assert "FAILED" not in out and "Traceback" not in out, out[-8000:]
