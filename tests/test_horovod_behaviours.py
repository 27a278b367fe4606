"""Horovod behaviours scripts rely on, on real workers (ringrun -np 2): tensor
names free again once their operation completed, horovodrun's worker
variables, and lost peers caught as ``HorovodInternalError``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun

WORKER = Path(__file__).parent / "workers" / "horovod_behaviours.py"
SCENARIOS = ["name_free_once_completed", "horovod_variables"]


@pytest.fixture(scope="module")
def scenarios_job():
    return run_ringrun(2, [sys.executable, WORKER, "scenarios", *SCENARIOS], timeout=120)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_on_two_ranks(scenarios_job, name):
    out = scenarios_job.stdout + scenarios_job.stderr
    for r in range(2):
        assert f"{r}: {name} ok" in scenarios_job.stdout, out[-6000:]


def test_exception_classes():
    from ring_strategy import exceptions as ex

    assert issubclass(ex.HorovodInternalError, ex.RingError)
    assert issubclass(ex.PeerFailureError, ex.HorovodInternalError)
    assert issubclass(ex.RingTimeoutError, ex.HorovodInternalError) and issubclass(ex.RingTimeoutError, TimeoutError)
    for other in (ex.BadArgumentError, ex.MismatchError, ex.ShutdownError):
        assert not issubclass(other, ex.HorovodInternalError), other
    interrupt = ex.HostsUpdatedInterrupt(skip_sync=True)
    assert interrupt.skip_sync is True and not isinstance(interrupt, ex.RingError)
    assert isinstance(interrupt, RuntimeError)
    import ring_strategy as rs

    assert rs.HorovodInternalError is ex.HorovodInternalError and rs.HostsUpdatedInterrupt is ex.HostsUpdatedInterrupt


@pytest.mark.parametrize("front_end", ["ring_strategy.torch", "ring_strategy.tensorflow"])
def test_front_ends_export_the_exceptions(front_end):
    from ring_strategy import exceptions as ex

    pytest.importorskip(front_end.split(".")[1])
    import importlib

    module = importlib.import_module(front_end)
    assert module.HorovodInternalError is ex.HorovodInternalError
    assert module.HostsUpdatedInterrupt is ex.HostsUpdatedInterrupt


@pytest.mark.parametrize("how, error", [("exit", "PeerFailureError"), ("stop", "RingTimeoutError")])
def test_lost_peer_is_caught_as_horovod_internal_error(how, error):
    # A stop that lands before the transfer is negotiated (a loaded machine)
    # is a stall: the stall limit makes that a RingTimeoutError too.
    env = {"RING_TIMEOUT_SECONDS": "2", "RING_STALL_SHUTDOWN_TIME_SECONDS": "4"}
    job = run_ringrun(2, [sys.executable, WORKER, f"lost-{how}"], env=env, timeout=60)
    out = job.stdout + job.stderr
    assert f"caught HorovodInternalError: {error}: " in job.stdout, out[-6000:]
