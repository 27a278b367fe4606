"""broadcast_parameters, broadcast_optimizer_state, broadcast_object,
allgather_object and SyncBatchNorm on two real workers (ringrun -np 2).
The world-of-one run of these scenarios is in test_optimizer.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "workers_opt"))

import functions_scenarios  # noqa: E402  (for its scenario names)
from harness import WORKERS, check_scenario, run  # noqa: E402


@pytest.fixture(scope="module")
def two_workers():
    return run(2, [WORKERS / "functions_scenarios.py"])


@pytest.mark.parametrize("name", list(functions_scenarios.SCENARIOS))
def test_two_workers(two_workers, name):
    check_scenario(two_workers, name, 2)


def test_two_workers_exit_code(two_workers):
    assert two_workers.returncode == 0, (two_workers.stdout + two_workers.stderr)[-8000:]
