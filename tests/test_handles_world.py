"""Handles belong to one world (numpy core and torch front end), on real
workers: after shutdown() and init(), an old handle raises ShutdownError
naming it instead of reaching an operation of the new world, and automatic
names start again at init(). See workers/frontend_core.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "frontend_core.py"
# A regression in the automatic names shows up as a stall (ranks wait on
# differently named tensors): make the engine end it with an error.
STALL_ENV = {"RING_STALL_CHECK_TIME_SECONDS": "2", "RING_STALL_SHUTDOWN_TIME_SECONDS": "20"}


@pytest.mark.parametrize("scenario", ["world_numpy", "world_torch"])
def test_old_handles_and_names_after_reinit(ringrun, scenario):
    proc = ringrun(2, [sys.executable, str(WORKER), scenario], env=STALL_ENV, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert len(passed_ranks(out, scenario)) == 2, out[-6000:]


def test_world_of_one_without_a_launcher():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    proc = subprocess.run([sys.executable, str(WORKER), "world_numpy", "world_torch"], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert len(passed_ranks(out, "world_numpy")) == 1 and len(passed_ranks(out, "world_torch")) == 1, out[-6000:]
