"""A job in which one rank fails while the others allreduce:
``python lost_peer.py MODE VICTIM [TAG]``.

MODE says how rank VICTIM fails:

- ``sigkill``: kills itself with SIGKILL while its part of a large
  allreduce is in transfer;
- ``sigkill-idle``: kills itself with SIGKILL without submitting the
  tensor the others wait for;
- ``exit``: ``os._exit(3)`` during the transfer, without ``shutdown()``;
- ``raise``: an uncaught Python exception during the transfer (the
  interpreter exits, running its exit handlers);
- ``stop``: SIGSTOP during the transfer: alive but silent, so the others
  can only time out (``RING_TIMEOUT_SECONDS``).

Before failing the victim prints ``victim <rank> pid <pid> failing at <unix
time> in flight <True|False>`` (whether its allreduce is still running).
The other ranks ignore SIGTERM, so that what they print comes from the
engine and not from the launcher stopping them; each prints ``rank <r>
caught <ExceptionClass> at <unix time>: <message>`` and exits 0 (1 in mode
``stop``, so that the launcher then kills the stopped victim). TAG is
unused; tests pass a unique one to find leftover processes.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import ring_strategy as rs

TENSOR = "lost.peer.grad"  # the name every error should mention
# 128 MiB of float32: on three ranks a transfer of at least 40 ms even on
# a fast, idle machine, so it is still running 10 ms after the victim
# submits (the others are already waiting for it: negotiation takes well
# under a millisecond).
ELEMENTS = 1 << 25
WARMUP_STEPS = 3


def fail(mode: str) -> None:
    """Makes this rank fail the way ``mode`` says."""
    handle = None
    if mode != "sigkill-idle":
        handle = rs.allreduce_async(np.ones(ELEMENTS, np.float32), name=TENSOR)
        time.sleep(0.01)  # negotiated by now; the transfer is under way
    in_flight = handle is not None and not rs.poll(handle)
    print(f"victim {rs.rank()} pid {os.getpid()} failing at {time.time():.3f} in flight {in_flight}", flush=True)
    if mode in ("sigkill", "sigkill-idle"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif mode == "exit":
        os._exit(3)
    elif mode == "raise":
        raise RuntimeError("the training script failed")
    rs.synchronize(handle)
    raise SystemExit(f"unknown mode {mode!r}")


def survive(mode: str) -> None:
    """Allreduces until the engine raises; reports the error and when it came."""
    try:
        while True:
            rs.allreduce(np.ones(ELEMENTS, np.float32), name=TENSOR)
    except rs.RingError as e:
        print(f"rank {rs.rank()} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)
    sys.exit(1 if mode == "stop" else 0)


def main() -> None:
    mode, victim = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # before the victim can fail
    rs.init()
    for _ in range(WARMUP_STEPS):
        rs.allreduce(np.ones(ELEMENTS, np.float32), name=TENSOR)
    if rs.rank() == victim:
        fail(mode)
    else:
        survive(mode)


if __name__ == "__main__":
    main()
