"""The allreduce algorithms (docs/scaling.md) on real workers: fusing changes
no bit under any of them, every rank gets the same bits, and recursive
doubling, halving-doubling and their size-based mix (tree) give identical
results, which is what lets the engine choose between them by size.
Worker: tests/workers/algorithms.py."""

import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "algorithms.py"


@pytest.mark.parametrize("np_, algorithms", [
    (4, ["ring", "tree", "doubling", "halving-doubling", "auto"]),
    (2, ["ring", "doubling", "auto"]),
])
def test_algorithms_agree_across_fusion_ranks_and_each_other(ringrun, np_, algorithms):
    proc = ringrun(np_, [sys.executable, str(WORKER), *algorithms], timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert all(f"{r}: algorithms ok" in out for r in range(np_)), out[-6000:]


def test_streaming_stores_change_no_bit(ringrun):
    """RING_STREAMING_STORES=1 (auto by default: buffers of 4x the L3 cache) takes the two-rank block
    allreduce's streaming path; its results are the plain path's."""
    proc = ringrun(2, [sys.executable, str(WORKER), "--streaming-stores"], timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert all(f"{r}: algorithms ok" in out for r in range(2)), out[-6000:]


def test_a_bad_algorithm_is_refused_by_name(ringrun):
    proc = ringrun(1, [sys.executable, "-c", "import ring_strategy as rs; rs.init()"],
                   env={"RING_ALLREDUCE_ALGORITHM": "fastest"}, timeout=60)
    assert proc.returncode != 0
    assert "RING_ALLREDUCE_ALGORITHM" in proc.stderr and "'fastest'" in proc.stderr, proc.stderr[-3000:]
