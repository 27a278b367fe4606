"""ring_strategy.run (Horovod's ``horovod.run``): a function run on two ranks
launched by ringrun, its results returned in rank order, a rank's error
raised in the caller."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ring_strategy


def rank_times_ten(offset, scale=1):
    import numpy as np

    import ring_strategy as rs

    rs.init()
    total = rs.allreduce(np.ones(1, np.float32), op=rs.Sum)[0]  # a real collective between the ranks
    return (rs.rank() * 10 + offset) * scale, int(total)


def fails_on_rank_one():
    import ring_strategy as rs

    rs.init()
    if rs.rank() == 1:
        raise KeyError("rank one failed on purpose")
    rs.barrier()  # rank 0 waits here until ringrun stops it
    return "unreachable"


def test_results_in_rank_order():
    assert ring_strategy.run(rank_times_ten, args=(1,), kwargs={"scale": 2}, np=2) == [(2, 2), (22, 2)]


def test_a_failing_rank_raises_its_error_in_the_caller():
    with pytest.raises(KeyError, match="rank one failed on purpose") as caught:
        ring_strategy.run(fails_on_rank_one, np=2)
    assert "rank 1:" in str(caught.value.__cause__) and "fails_on_rank_one" in str(caught.value.__cause__)


def test_unsupported_options_are_clear_errors():
    with pytest.raises(NotImplementedError, match="min_np"):
        ring_strategy.run(rank_times_ten, np=2, min_np=1)
    with pytest.raises(ValueError, match="np should be a positive integer"):
        ring_strategy.run(rank_times_ten, np=0)


def test_import_stays_lazy():
    code = "import sys, ring_strategy; print('ring_strategy.runner.run_fn' in sys.modules, callable(ring_strategy.run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
