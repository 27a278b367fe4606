"""Process sets on the numpy core, 4 real ranks (tests/workers/process_sets_numpy.py):
sets of 1, 2 and 3 ranks and overlapping sets in flight together, over shared
memory and TCP; dynamic sets added and removed collectively; disagreements
and misuse as clear errors on every rank."""

import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun
from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "process_sets_numpy.py"
STATIC = ["layout", "collectives_on_each_set", "sets_in_flight_together", "errors"]
DYNAMIC = ["add_and_remove", "disagreements", "new_world_forgets_sets"]


def run(mode, scenarios, env):
    proc = run_ringrun(4, [sys.executable, WORKER, mode], env=env, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for s in scenarios:
        assert len(passed_ranks(out, s)) == 4, f"{s}:\n{out[-8000:]}"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_static_sets(transport):
    run("static", STATIC, {"RING_TRANSPORT": transport})


def test_dynamic_sets():
    run("dynamic", DYNAMIC, {"RING_DYNAMIC_PROCESS_SETS": "1"})


def test_dynamic_sets_under_horovods_name():
    run("dynamic", ["add_and_remove"], {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})
