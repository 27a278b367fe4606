"""Grouped submission on real workers (issue 20, item 1): a group of
tensors is queued with one engine call and waited for with one. A member
the engine refuses raises on every rank and queues nothing; mixed dtypes
work; results equal the per-tensor path's bit for bit (numpy core, torch,
TensorFlow). Workers: tests/workers/grouped.py; the signals of a group wait:
tests/reliability/workers/signals.py (numpy_group)."""

import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "grouped.py"
CORE = ["mixed_dtypes", "bad_member", "bitwise_numpy", "overlapping_memory", "bitwise_torch"]
# A stray queued member would leave its peers waiting: make the engine end that with an error.
STALL_ENV = {"RING_STALL_CHECK_TIME_SECONDS": "2", "RING_STALL_SHUTDOWN_TIME_SECONDS": "20", "OMP_NUM_THREADS": "1"}


def _run(ringrun, np_, scenarios, timeout=120):
    proc = ringrun(np_, [sys.executable, str(WORKER), *scenarios], env={**STALL_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"},
                   timeout=timeout)
    out = proc.stdout + proc.stderr
    for s in scenarios:
        assert len(passed_ranks(out, s)) == np_, f"{s}:\n{out[-6000:]}"
    assert proc.returncode == 0, out[-6000:]


@pytest.mark.parametrize("np_", [1, 2])
def test_groups_on_every_rank(ringrun, np_):
    _run(ringrun, np_, CORE + (["mismatch_member"] if np_ > 1 else []))


# Importing TensorFlow in both workers costs 10 s of make test's budget: slow-marked.
@pytest.mark.slow
def test_tensorflow_groups_equal_single_allreduces(ringrun):
    _run(ringrun, 2, ["bitwise_tensorflow"], timeout=180)
