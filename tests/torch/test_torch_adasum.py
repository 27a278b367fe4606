"""op=Adasum in ring_strategy.torch on real workers (tests/torch/workers/torch_adasum.py):
collectives and autograd for 1, 2 and 4 ranks, DistributedOptimizer(op=Adasum)
against the rule computed by hand, and the error for 3 ranks."""

import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun

WORKER = Path(__file__).parent / "workers" / "torch_adasum.py"


def run(np_, scenarios):
    proc = run_ringrun(np_, [sys.executable, WORKER, *scenarios], timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for s in scenarios:
        assert out.count(f": {s} ok") == np_, out[-6000:]


# np=4 (Adasum's recursive halving past one pair) is also tested on the numpy core
# (tests/test_adasum.py); here it costs 5 s of make test's budget: slow-marked.
@pytest.mark.parametrize("np_", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_collectives(np_):
    run(np_, ["collectives", "autograd", "errors"])


@pytest.mark.parametrize("np_", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_distributed_optimizer(np_):
    run(np_, ["optimizer", "optimizer_groups"])


def test_three_ranks_are_refused():
    run(3, ["unsupported_size", "errors"])
