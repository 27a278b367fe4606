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


def grows_to_two(hosts_file, steps):
    """An elastic loop that lists a second slot at step 5 and ends once it
    made ``steps`` steps in a world of two; returns (rank, world sizes seen)."""
    import time

    import numpy as np

    import ring_strategy as rs
    from ring_strategy import elastic

    rs.init()
    state = elastic.ObjectState(rs.broadcast_object, rs.rank, step=0, sizes=[])
    deadline = time.monotonic() + 60

    @elastic.run
    def train(state):
        while state.step < steps or state.sizes[-1] < 2:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job did not grow to two workers: {state.sizes}")
            state.sizes.append(int(rs.allreduce(np.ones(1, np.float32), op=rs.Sum, name="grow")[0]))
            state.step += 1
            if rs.rank() == 0 and state.step == 5:
                with open(hosts_file, "w") as f:
                    f.write("localhost:2\n")
            state.commit()
            time.sleep(0.05)
        return state.sizes

    sizes = train(state)
    return rs.rank(), sizes


def test_elastic_job_grows_and_returns_the_last_worlds_results(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n")
    results = ring_strategy.run(grows_to_two, args=(str(hosts), 20), np=1, min_np=1, max_np=2,
                                host_discovery_script=f"cat {hosts}")
    assert [rank for rank, _ in results] == [0, 1], results
    for _, sizes in results:
        assert sizes[0] == 1 and sizes[-1] == 2 and sorted(sizes) == sizes, sizes
    assert results[0][1] == results[1][1], "the joined worker took rank 0's state"


def test_unsupported_options_are_clear_errors():
    with pytest.raises(NotImplementedError, match="use_mpi"):
        ring_strategy.run(rank_times_ten, np=2, use_mpi=True)
    with pytest.raises(ValueError, match="for elastic jobs"):
        ring_strategy.run(rank_times_ten, np=2, reset_limit=2)
    with pytest.raises(ValueError, match="np should be a positive integer"):
        ring_strategy.run(rank_times_ten, np=0)


def test_import_stays_lazy():
    code = "import sys, ring_strategy; print('ring_strategy.runner.run_fn' in sys.modules, callable(ring_strategy.run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
