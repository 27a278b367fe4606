"""Elastic trainings the Ray and Spark tests run on their workers:
:mod:`elastic_train`'s least squares written as an elastic script
(``ring_strategy.elastic.run`` and an ``ObjectState`` committed after every
step), so the ranks at the end must be within 1e-5 of one process training
on the same global batches, whatever worlds they went through.

The tests pickle this module (and ``elastic_train``) by value, so the
workers need not import them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "elastic"))
import elastic_train  # noqa: E402


def _step(state: Any, x: np.ndarray, y: np.ndarray) -> None:
    """One step on this rank's rows of global batch ``state.step``, then a commit."""
    import ring_strategy as rs

    rows = elastic_train.batch(state.step)[rs.rank()::rs.size()]
    total = rs.allreduce(elastic_train.gradient(state.w, x[rows], y[rows]), op=rs.Sum, name="grad")
    state.w = (state.w - elastic_train.LR * total / elastic_train.BATCH).astype(np.float32)
    state.step += 1
    state.commit()


def elastic_least_squares(steps: int, victim: int, fail_at: int) -> Dict[str, Any]:
    """Trains under the elastic loop; worker ``victim`` SIGKILLs itself before step ``fail_at``."""
    import signal

    import ring_strategy as rs
    from ring_strategy.elastic import ObjectState, run
    from ring_strategy.elastic.state import broadcast_object

    rs.init()
    x, y = elastic_train.data()
    state = ObjectState(broadcast_object, rs.rank, step=0, w=np.zeros(elastic_train.DIM, np.float32))
    worlds = []

    @run
    def train(state: ObjectState) -> None:
        worlds.append(rs.size())
        while state.step < steps:
            if os.environ["RING_ELASTIC_WORKER"] == str(victim) and state.step == fail_at:
                os.kill(os.getpid(), signal.SIGKILL)
            _step(state, x, y)

    train(state)
    return {"pid": os.getpid(), "rank": rs.rank(), "size": rs.size(), "worlds": worlds, "steps": state.step,
            "w": state.w.tobytes().hex()}


def growing_least_squares(steps: int, free_at: int, free: Callable[[], Any], size: int) -> Dict[str, Any]:
    """Trains under the elastic loop; at step ``free_at`` rank 0 calls
    ``free()`` (which frees the room a spare worker waits for), and the
    ranks then commit without training until the world has ``size`` ranks."""
    import ring_strategy as rs
    from ring_strategy.elastic import ObjectState, run
    from ring_strategy.elastic.state import broadcast_object

    rs.init()
    x, y = elastic_train.data()
    state = ObjectState(broadcast_object, rs.rank, step=0, w=np.zeros(elastic_train.DIM, np.float32))
    worlds, times = [], {}

    @run
    def train(state: ObjectState) -> None:
        worlds.append(rs.size())
        times.setdefault(rs.size(), time.time())
        while state.step < steps:
            if state.step == free_at and rs.size() < size:
                if rs.rank() == 0 and "freed" not in times:
                    times["freed"] = time.time()
                    free()
                for _ in range(600):  # the same count on every rank: commit is a collective
                    if rs.size() >= size:
                        break
                    time.sleep(0.05)
                    state.commit()  # raises HostsUpdatedInterrupt once the spare is in the next world
            _step(state, x, y)

    train(state)
    return {"pid": os.getpid(), "rank": rs.rank(), "size": rs.size(), "worlds": worlds, "steps": state.step,
            "w": state.w.tobytes().hex(), "times": times}
