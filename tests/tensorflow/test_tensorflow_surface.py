"""The rest of horovod.tensorflow's surface on two real workers (ringrun -np 2):
grouped_allgather, grouped_reducescatter, join, start_timeline /
stop_timeline, SyncBatchNormalization, PartialDistributedGradientTape,
broadcast_, broadcast_object_fn, size_op and the other query ops.

One ringrun runs every scenario of workers/tf_surface_worker.py in sequence
(importing TensorFlow is the slow part); each test then checks its
scenario's "<rank>: <scenario> ok" line on both ranks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "tf_surface_worker.py"
SCENARIOS = ["grouped_allgather", "grouped_reducescatter", "timeline", "sync_batch_norm", "partial_tape",
             "broadcast_inplace", "process_ops", "join"]
_runs: dict = {}


@pytest.fixture(scope="module")
def output(run_output, tmp_path_factory) -> str:
    if "out" not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        out_dir = tmp_path_factory.mktemp("tf_surface")
        _runs["out"] = run_output(2, [sys.executable, str(WORKER), str(out_dir), *SCENARIOS], env=env, timeout=240)
    return _runs["out"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, output):
    assert {"0", "1"} <= set(passed_ranks(output, scenario)), f"{scenario}:\n{output[-8000:]}"


def test_exit_code(output):
    assert output.startswith("[ringrun exit code 0]"), output[-8000:]
