"""Timeline scenarios under ringrun: `python worker.py MODE [PATH]`.

env:      RING_TIMELINE is set by ringrun; a few named steps, then shutdown.
runtime:  start_timeline(PATH, mark_cycles=True) around the middle steps only.
crash:    RING_TIMELINE is set; rank 0 is killed (SIGKILL) after some steps.
"""

import os
import signal
import sys
import time

import numpy as np

import ring_strategy as rs
import ring_strategy.timeline as tl


def steps(prefix: str, count: int) -> None:
    tensors = [np.full((3, 4), rs.rank(), np.float32), np.ones(10, np.float32), np.ones(7, np.float32)]
    for _ in range(count):
        handles = [rs.allreduce_async(t, name=f"{prefix}.grad.{i}") for i, t in enumerate(tensors)]
        for h in handles:
            rs.synchronize(h)
        rs.broadcast(np.arange(5), 0, name=f"{prefix}.bcast")
        rs.allgather(np.ones((2, 2)), name=f"{prefix}.gather")


def main() -> None:
    mode = sys.argv[1]
    rs.init()
    if mode == "env":
        steps("env", 3)
    elif mode == "runtime":
        steps("before", 2)
        tl.start_timeline(sys.argv[2], mark_cycles=True)
        steps("during", 2)
        tl.stop_timeline()
        steps("after", 2)
    elif mode == "crash":
        steps("crash", 3)
        time.sleep(0.3)  # past the timeline's 100 ms flush interval
        steps("crash", 1)
        if rs.rank() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)
    rs.shutdown()
    print(f"{rs.__name__} rank done", flush=True)


if __name__ == "__main__":
    main()
