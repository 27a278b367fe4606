"""Process sets in ring_strategy.torch on 4 real ranks
(tests/torch/workers/torch_process_sets.py): every collective form on sets of
1, 2 and 3 ranks, overlapping sets in flight together, autograd,
DistributedOptimizer and SyncBatchNorm on a set, and the errors."""

import sys
from pathlib import Path

from tests.jobs import run_ringrun
from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "torch_process_sets.py"
SCENARIOS = ["ops", "in_flight_together", "autograd", "optimizer", "sync_batch_norm", "errors"]


def test_process_sets_on_four_ranks():
    proc = run_ringrun(4, [sys.executable, WORKER, *SCENARIOS], timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for s in SCENARIOS:
        assert len(passed_ranks(out, s)) == 4, f"{s}:\n{out[-8000:]}"
