"""Dynamic process sets removed while their members still use them (issue 37),
on real ranks: a rank reaching ``remove_process_set`` first must not take
the set from under its members (rank 0 negotiates every set). Workers:
tests/workers/process_set_removal.py (numpy) and
tests/torch/workers/torch_set_removal.py (the issue's Horovod-style script).

Every job ends each scenario in a barrier, so a removal that leaves one rank
behind shows as a failure or a hang (the job's timeout), not as a pass."""

import re
import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun
from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
NUMPY_WORKER = HERE / "workers" / "process_set_removal.py"
TORCH_WORKER = HERE / "torch" / "workers" / "torch_set_removal.py"
# With 3 ranks or more (unfinished_refused needs a set of two that is not
# the global one).
NUMPY_SCENARIOS = ["issue_script", "collectives_then_remove", "singletons", "overlapping", "use_right_after_add",
                   "async_then_remove", "cycles"]
TORCH_SCENARIOS = ["broadcasts", "collectives", "async_unsynchronized"]
# Bounds how long a removal waits for operations that never finish.
TIMEOUT_S = 4


def run(np_, worker, scenarios, *options, timeout=120):
    proc = run_ringrun(np_, [sys.executable, worker, *options, *scenarios],
                       env={"RING_TIMEOUT_SECONDS": str(TIMEOUT_S)}, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for s in scenarios:
        assert len(passed_ranks(out, s)) == np_, f"{s}:\n{out[-8000:]}"
    return out


@pytest.mark.parametrize("np_", [2, 4])
def test_removal_waits_for_members(np_):
    """The issue's script and its variants (sets of one, overlapping sets,
    use right after adding, asynchronous operations left unsynchronized, a
    member late to submit, 50 add/use/remove cycles over 5 worlds)."""
    scenarios = NUMPY_SCENARIOS + (["unfinished_refused"] if np_ > 2 else [])
    out = run(np_, NUMPY_WORKER, scenarios)
    if np_ > 2:  # refused on every rank once RING_TIMEOUT_SECONDS has passed, not hung
        waited = [float(s) for s in re.findall(r"unfinished removal refused after ([\d.]+) s", out)]
        assert len(waited) == np_ and all(TIMEOUT_S - 0.5 < w < TIMEOUT_S + 5 for w in waited), waited


def test_horovod_script_in_torch():
    """As the issue found it: ring_strategy.torch, np=2, sets of one."""
    run(2, TORCH_WORKER, TORCH_SCENARIOS)


@pytest.mark.slow
def test_horovod_script_in_torch_four_ranks():
    run(4, TORCH_WORKER, TORCH_SCENARIOS, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("np_", [2, 4])
def test_many_cycles(np_):
    """500 add/use/remove cycles over 25 worlds."""
    run(np_, NUMPY_WORKER, ["cycles"], "--cycles=500", "--worlds=25", timeout=600)
