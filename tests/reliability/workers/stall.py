"""A job in which rank 1 stops submitting: ``python stall.py MODE HOLD [TAG]``.

Every rank first allreduces a few steps together. Then, with the time
printed as ``rank <r> stalling at <unix time>``:

- MODE ``late``: the other ranks submit ``stall.missing`` and wait; rank 1
  sleeps HOLD seconds before submitting it, so the job goes on. Every rank
  prints ``<r>: done``.
- MODE ``diverged``: the other ranks wait on ``stall.missing``, rank 1 on
  ``stall.other``, which the others never submit: only the stall inspector
  can end it (``RING_STALL_SHUTDOWN_TIME_SECONDS``); rank 1 gives up after
  HOLD seconds. Every rank prints ``rank <r> caught <Class> at <unix time>:
  <message>`` for the error it gets.
- MODE ``mismatched``: as ``diverged``, but in different collectives: the
  other ranks in an allgather, rank 1 in a barrier (a test suite's
  tearDown after a rank skipped a step).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import ring_strategy as rs

STALLED = 1


def late(hold: float) -> None:
    if rs.rank() == STALLED:
        time.sleep(hold)
    got = rs.allreduce(np.ones(4, np.float32), op=rs.Sum, name="stall.missing")
    assert got[0] == rs.size(), got
    rs.barrier()
    print(f"{rs.rank()}: done", flush=True)


def diverged(hold: float) -> None:
    name = "stall.other" if rs.rank() == STALLED else "stall.missing"
    handle = rs.allreduce_async(np.ones(4, np.float32), name=name)
    deadline = time.time() + hold
    try:
        while not rs.poll(handle):
            if time.time() > deadline:
                print(f"rank {rs.rank()} gave up after {hold:g} s without an error", flush=True)
                return
            time.sleep(0.01)
        rs.synchronize(handle)
        print(f"rank {rs.rank()} completed {name} without an error", flush=True)
    except rs.RingError as e:
        print(f"rank {rs.rank()} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)


def mismatched(hold: float) -> None:
    try:
        if rs.rank() == STALLED:
            rs.barrier()
        else:
            rs.allgather(np.ones((1, 2), np.float32), name="stall.gather")
        print(f"rank {rs.rank()} completed without an error", flush=True)
    except rs.RingError as e:
        print(f"rank {rs.rank()} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)


def main() -> None:
    mode, hold = sys.argv[1], float(sys.argv[2])
    rs.init()
    for step in range(3):
        rs.allreduce(np.ones(4, np.float32), name=f"before.{step}")
    print(f"rank {rs.rank()} stalling at {time.time():.3f}", flush=True)
    {"late": late, "diverged": diverged, "mismatched": mismatched}[mode](hold)


if __name__ == "__main__":
    main()
