"""The small-tensors step (200 allreduces of 16 KiB, then a wait for all)
for a fixed number of seconds: `python worker.py SECONDS`. Rank 0 prints the
median step time of the first and of the last 20 steps."""

import sys
import time

import numpy as np

import ring_strategy as rs


def main() -> None:
    seconds = float(sys.argv[1])
    rs.init()
    tensors = [np.ones(4096, np.float32) for _ in range(200)]
    names = [f"grad.{i}" for i in range(len(tensors))]
    times = []
    end = time.perf_counter() + seconds
    while True:
        # Every rank stops after the same step: rank 0 decides.
        go = rs.broadcast(np.array([time.perf_counter() < end], np.uint8), 0, name="go")[0]
        if not go:
            break
        t0 = time.perf_counter()
        handles = [rs.allreduce_async(t, op=rs.Sum, name=n) for t, n in zip(tensors, names)]
        for h in handles:
            rs.synchronize(h)
        times.append(time.perf_counter() - t0)
    if rs.rank() == 0:
        first, last = np.median(times[:20]), np.median(times[-20:])
        print(f"steps {len(times)} first_ms {first * 1e3:.3f} last_ms {last * 1e3:.3f}", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
