"""op=Adasum on real worker processes: the numpy API against a plain numpy
implementation of the same formula (tests/workers/adasum_reference.py) for
1, 2, 4 and 8 ranks, and the clear error for other world sizes."""

import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun

WORKERS = Path(__file__).parent / "workers"
ALL = ["fused", "single", "scaled", "zeros", "same_everywhere", "errors"]


def run(np_, scenarios, transport="shm"):
    proc = run_ringrun(np_, [sys.executable, WORKERS / "adasum_ops.py", *scenarios],
                       env={"RING_TRANSPORT": transport, "RING_CYCLE_TIME": "20"}, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for s in scenarios:
        assert out.count(f": {s} ok") == np_, out[-6000:]


@pytest.mark.parametrize("np_", [1, 2, 4, 8])
def test_matches_numpy(np_):
    run(np_, ALL)


def test_matches_numpy_over_tcp():
    run(4, ["fused", "zeros"], transport="tcp")


@pytest.mark.parametrize("np_", [3, 6])
def test_world_size_not_a_power_of_two(np_):
    run(np_, ["unsupported_size"])
