"""State, ObjectState and the run loop in this process, a world of one (no
launcher: a reset re-forms the same world). The test drives the loop's
exits itself: the training function raises, or ``_world.host_updates`` is
replaced for the test's duration."""

from __future__ import annotations

import os
from unittest import mock

import pytest

import ring_strategy
from ring_strategy.elastic import ObjectState, State, _world, run
from ring_strategy.elastic.loop import lost_a_peer
from ring_strategy.elastic.state import broadcast_object
from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt, PeerFailureError


_LAUNCHER_VARIABLES = ("RING_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                       "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def world():
    """A world of one, whatever launcher started pytest."""
    alone = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_VARIABLES)}
    with mock.patch.dict(os.environ, alone, clear=True):
        ring_strategy.init()
        try:
            yield
        finally:
            ring_strategy.shutdown()


def _state(**values) -> ObjectState:
    return ObjectState(broadcast_object, ring_strategy.rank, **values)


def test_object_state_saves_copies_and_restores_them():
    state = _state(epoch=0, seen=[])
    state.seen.append(1)
    state.epoch = 1
    state.commit()
    state.seen.append(2)
    state.epoch = 2
    state.restore()
    assert (state.epoch, state.seen) == (1, [1])  # a deep copy: the later append is gone too


def test_sync_takes_the_current_values_and_keeps_them_as_the_commit():
    state = _state(epoch=0)
    state.epoch = 5
    state.sync()
    state.epoch = 6
    state.restore()
    assert state.epoch == 5


def test_check_host_updates_raises_with_skip_sync(monkeypatch):
    state = _state(epoch=0)
    state.check_host_updates()  # nothing announced
    monkeypatch.setattr(_world, "host_updates", lambda: (True, True))
    with pytest.raises(HostsUpdatedInterrupt) as e:
        state.commit()
    assert e.value.skip_sync is True


def test_run_restores_resets_and_goes_on_after_a_lost_peer():
    state = _state(step=0)
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append((state.step, ring_strategy.is_initialized()))])

    @run
    def train(state, steps):
        while state.step < steps:
            state.step += 1
            calls.append(state.step)
            if state.step == 4 and len(calls) == 4:
                raise PeerFailureError("lost rank 1: test")  # a HorovodInternalError
            if state.step % 3 == 0:
                state.commit()
        return "done"

    assert train(state, 6) == "done"
    assert calls == [1, 2, 3, 4, 4, 5, 6]  # back to the commit after step 3
    assert resets == [(3, True)]


def test_run_lets_other_errors_through():
    @run
    def train(state):
        raise ValueError("not a lost peer")

    with pytest.raises(ValueError, match="not a lost peer"):
        train(_state())


class _Counting(State):
    def __init__(self):
        super().__init__(broadcast_object, ring_strategy.rank)
        self.log = []

    def save(self):
        self.log.append("save")

    def restore(self):
        self.log.append("restore")

    def sync(self):
        self.log.append("sync")

    def reset(self):
        self.log.append("reset")


@pytest.mark.parametrize("skip_sync", [True, False])
def test_run_after_hosts_updated_syncs_unless_skipped(skip_sync):
    state = _Counting()
    state.register_reset_callbacks([lambda: state.log.append("callback")])

    @run
    def train(state):
        if "reset" not in state.log:
            raise HostsUpdatedInterrupt(skip_sync)

    train(state)
    assert state.log == ["sync", "reset", "callback"] + ([] if skip_sync else ["sync"])


def test_lost_a_peer_reads_framework_wrapped_errors():
    assert lost_a_peer(HorovodInternalError("x"))
    assert lost_a_peer(RuntimeError("Graph execution error:\n\nPeerFailureError: lost rank 1 (vm)"))
    assert lost_a_peer(RuntimeError("INTERNAL: CpuCallback error: RingTimeoutError: no progress"))
    assert not lost_a_peer(RuntimeError("PeerFailureErrorish"))
    assert not lost_a_peer(ValueError("bad input"))
