"""Python signals while a rank waits on a peer that has not submitted yet:
``python signals.py SCENARIO... [TAG]`` on 2 ranks.

Rank 1 is the late peer: it submits each scenario's operation only
LATE seconds after the scenario starts. Rank 0 waits for it and, meanwhile,
gets a signal (SIGALRM from a timer, or SIGINT as Ctrl-C sends it); the
handler's exception must come out of the wait well before rank 1 submits,
and the operation must still complete when synchronized again. Each
scenario prints ``<rank>: <scenario> ok``; ``leave`` ends the job with
``shutdown()`` on rank 0 while rank 1 still has work, and rank 1 reports
the clear error it gets. Arguments that name no scenario are ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

import ring_strategy as rs
from tests.workers.checks import equal, run_scenarios

LATE = 2.0  # seconds rank 1 waits before it submits
SIGNAL_AT = 0.3  # seconds after the wait began that rank 0 gets the signal


class Alarm(Exception):
    """What the SIGALRM handler raises (as pytest-timeout's handler does)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Alarm("SIGALRM")


def interrupted(kind: str, wait: Callable[[], Any]) -> None:
    """``wait()`` on rank 0 must raise the signal's exception within LATE / 2."""
    start = time.monotonic()
    if kind == "alarm":
        signal.setitimer(signal.ITIMER_REAL, SIGNAL_AT)
        expected: type = Alarm
    else:
        threading.Timer(SIGNAL_AT, os.kill, (os.getpid(), signal.SIGINT)).start()
        expected = KeyboardInterrupt
    try:
        wait()
    except expected:
        took = time.monotonic() - start
        assert took < LATE / 2, f"the {kind} came out after {took:.2f} s"
        print(f"0: {kind} came out of the wait after {took:.2f} s", flush=True)
        return
    raise AssertionError(f"the wait returned without the {kind}: rank 1 submitted after {LATE} s?")


def late(submit: Callable[[], Any]) -> Any:
    time.sleep(LATE)
    return submit()


def numpy_async() -> None:
    """SIGALRM out of synchronize(); the same handle synchronized again."""
    x = np.ones(3, np.float32)
    if rs.rank() == 0:
        h = rs.allreduce_async(x, op=rs.Sum, name="sig.np")
        interrupted("alarm", lambda: rs.synchronize(h))
        equal(rs.synchronize(h), x * 2, "after the alarm")
    else:
        equal(late(lambda: rs.allreduce(x, op=rs.Sum, name="sig.np")), x * 2, "late peer")


def numpy_group() -> None:
    """Ctrl-C out of the one wait of a grouped allreduce's synchronize(); the
    same handle synchronized again gives every member's result."""
    xs = [np.ones(3, np.float32), np.arange(4), np.ones(2, np.float16)]
    if rs.rank() == 0:
        h = rs.grouped_allreduce_async(xs, op=rs.Sum, name="sig.group")
        interrupted("sigint", lambda: rs.synchronize(h))
        rs.poll(h)  # still a known handle: nothing was released
        outs = rs.synchronize(h)
    else:
        outs = late(lambda: rs.grouped_allreduce(xs, op=rs.Sum, name="sig.group"))
    for i, (out, x) in enumerate(zip(outs, xs)):
        equal(out, x * 2, f"member {i}")


def numpy_sync() -> None:
    """SIGALRM out of a synchronous allreduce into a given array: the
    abandoned operation still completes into it (its buffers stay alive
    until the engine is done), and the next operations work."""
    x = np.ones(3, np.float32)
    out = np.zeros(3, np.float32)
    if rs.rank() == 0:
        interrupted("alarm", lambda: rs.allreduce(x, op=rs.Sum, name="sig.sync", out=out))
    else:
        late(lambda: rs.allreduce(x, op=rs.Sum, name="sig.sync", out=out))
    equal(rs.allreduce(np.ones(2), op=rs.Sum, name="sig.sync.after"), np.full(2, 2.0), "engine works")
    equal(out, x * 2, "the abandoned allreduce's output")


def numpy_barrier() -> None:
    """Ctrl-C out of a blocking barrier; the next operations work."""
    if rs.rank() == 0:
        interrupted("sigint", rs.barrier)
    else:
        late(rs.barrier)  # pairs with rank 0's interrupted barrier, which completes unseen
    equal(rs.allreduce(np.ones(2), op=rs.Sum, name="sig.after"), np.full(2, 2.0), "engine works")


def torch_handle() -> None:
    """Ctrl-C out of torch's synchronize(int handle); the handle stays valid."""
    import torch

    import ring_strategy.torch as hvd

    x = torch.ones(4)
    if rs.rank() == 0:
        h = hvd.allreduce_async(x, op=hvd.Sum, name="sig.torch")
        interrupted("sigint", lambda: hvd.synchronize(h))
        hvd.poll(h)  # still a known handle
        equal(hvd.synchronize(h), x * 2, "after Ctrl-C")
    else:
        equal(late(lambda: hvd.allreduce(x, op=hvd.Sum, name="sig.torch")), x * 2, "late peer")


def tensorflow_eager() -> None:
    """SIGALRM out of an eager TensorFlow allreduce."""
    import tensorflow as tf

    import ring_strategy.tensorflow as hvd

    if rs.rank() == 0:
        interrupted("alarm", lambda: hvd.allreduce(tf.ones(2), op=hvd.Sum, name="sig.tf"))
    else:
        late(lambda: hvd.allreduce(tf.ones(2), op=hvd.Sum, name="sig.tf"))
    equal(hvd.allreduce(tf.ones(2), op=hvd.Sum, name="sig.tf.after"), np.full(2, 2.0, np.float32), "engine works")


def leave() -> None:
    """Ctrl-C, then shutdown(): the job ends cleanly on every rank."""
    if rs.rank() == 0:
        interrupted("sigint", rs.barrier)
        rs.shutdown()
        print("0: leave ok", flush=True)
        return
    time.sleep(LATE)
    try:
        rs.allreduce(np.ones(1), name="sig.left")
    except (rs.PeerFailureError, rs.ShutdownError) as e:
        assert "left the job" in str(e), e
        print(f"1: leave ok ({type(e).__name__}: {e})", flush=True)
        return
    raise AssertionError("rank 1's allreduce completed after rank 0 left")


SCENARIOS = {f.__name__: f for f in [numpy_async, numpy_group, numpy_sync, numpy_barrier, torch_handle, tensorflow_eager]}


def main() -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    rs.init()
    names = [a for a in sys.argv[1:] if a in SCENARIOS]
    run_scenarios(SCENARIOS, names, rs.rank(), stop_at_failure=True)
    if "leave" in sys.argv[1:]:
        leave()
    else:
        rs.shutdown()


if __name__ == "__main__":
    main()
