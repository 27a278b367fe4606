"""The rest of horovod.tensorflow's surface on real workers (ringrun -np 2 and 3):
grouped_allgather, grouped_reducescatter, join, start_timeline /
stop_timeline, SyncBatchNormalization, PartialDistributedGradientTape,
broadcast_, broadcast_object_fn, size_op and the other query ops.

One ringrun per size runs every scenario of workers/tf_surface_worker.py in
sequence (importing TensorFlow is the slow part); each test then checks its
scenario's "<rank>: <scenario> ok" line on every rank.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Tuple

import pytest

from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "tf_surface_worker.py"
SCENARIOS = ["grouped_allgather", "grouped_reducescatter", "timeline", "sync_batch_norm", "partial_tape",
             "broadcast_inplace", "process_ops", "join"]
_runs: dict = {}


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request, run_output, tmp_path_factory) -> Tuple[int, str]:
    """(number of workers, the job's output), one job per size."""
    np_ = request.param
    if np_ not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        out_dir = tmp_path_factory.mktemp(f"tf_surface_np{np_}")
        _runs[np_] = run_output(np_, [sys.executable, str(WORKER), str(out_dir), *SCENARIOS], env=env, timeout=240)
    return np_, _runs[np_]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, job):
    np_, out = job
    assert {str(r) for r in range(np_)} <= set(passed_ranks(out, scenario)), f"{scenario}:\n{out[-8000:]}"


def test_exit_code(job):
    assert job[1].startswith("[ringrun exit code 0]"), job[1][-8000:]
