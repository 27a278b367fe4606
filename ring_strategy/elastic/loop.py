"""The elastic training loop: ``run`` wraps a training function so that a
lost worker or a change of hosts rolls the job back to its last commit and
carries on in the next world instead of ending it.

The loop, on every rank::

    need_sync = True
    while True:
        try:
            if any rank needs_sync:          # decided together: one allreduce
                state.sync()
            return func(state, *args, **kwargs)
        except HorovodInternalError:          # a peer was lost, or a timeout (also
                                              # as a framework wraps it: lost_a_peer)
            state.restore()                   # back to the last commit
            need_sync = True
        except HostsUpdatedInterrupt as e:    # raised by state.commit()
            need_sync = not e.skip_sync
        _world.reset()                        # leave this world, join the next
        state.on_reset()                      # state.reset(), then the callbacks

Every rank of a world takes the same branch together: the sync decision is
one allreduce (a rank that joins later always needs a sync, so everyone
syncs with it), and ``HostsUpdatedInterrupt`` is raised on every rank at the
same commit. How many resets a job may take is the launcher's business.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, TypeVar

import numpy as np

from ring_strategy.elastic import _world
from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["run", "lost_a_peer"]

_Func = TypeVar("_Func", bound=Callable[..., Any])
_SYNC_DECISION = "elastic.sync_decision"
# How a framework that wraps an error raised inside its graph (TensorFlow's
# UnknownError from a tf.numpy_function, JAX's from an io_callback) shows a
# lost peer: the original error's class name, a colon, its message.
_WRAPPED = re.compile(r"\b(HorovodInternalError|PeerFailureError|RingTimeoutError): ")


def run(func: _Func) -> _Func:
    """Decorates ``func(state, *args, **kwargs)`` to run as an elastic
    training loop (see the module's docstring).

    The state is synced from rank 0 before the first call and after every
    reset (unless every rank may skip it: workers were only removed, so every
    member holds the same state); after a ``HorovodInternalError`` it is first restored to its
    last commit.

    Args:
        func: The training function; its first argument is the
            :class:`~ring_strategy.elastic.state.State`.

    Returns:
        The wrapped function; it returns what ``func`` returns.

    Example::

        @hvd.elastic.run
        def train(state):
            for state.epoch in range(state.epoch, epochs):
                ...
                state.commit()

        train(hvd.elastic.TorchState(model, optimizer, epoch=0))
    """

    @functools.wraps(func)
    def wrapper(state: Any, *args: Any, **kwargs: Any) -> Any:
        need_sync = True
        while True:
            try:
                if _anyone_needs_sync(need_sync):
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                need_sync = not e.skip_sync
            except Exception as e:  # noqa: BLE001 - a lost peer goes on below, anything else is raised again
                if not lost_a_peer(e):
                    raise
                state.restore()
                need_sync = True
            _world.reset()
            state.on_reset()

    return wrapper  # type: ignore[return-value]


def lost_a_peer(error: BaseException) -> bool:
    """Whether ``error`` is a ``HorovodInternalError`` (a lost peer or a
    timeout), itself or wrapped by a framework that ran the collective in
    its graph."""
    return isinstance(error, HorovodInternalError) or bool(_WRAPPED.search(str(error)))


def _anyone_needs_sync(need_sync: bool) -> bool:
    """Whether any rank of this world needs a sync (a collective, so every
    rank syncs or none does)."""
    from ring_strategy import ops

    votes = ops.allreduce(np.array([int(need_sync)], dtype=np.int32), op=ops.Max, name=_SYNC_DECISION)
    return bool(votes[0])
