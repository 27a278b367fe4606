"""One chaos job's worker: ``python chaos.py STEPS [TAG]``.

Prints ``pid <rank> <pid>`` at start, then runs STEPS allreduces whose exact
result it checks, and ``<rank>: chaos ok`` at the end. A fault injected by
the test (tests/reliability/test_chaos.py) must either let it finish with
correct results or end it with a ring error, printed as
``<rank>: chaos error <Class>: <message>``; a wrong number is an
AssertionError, which the test counts as a failure of the library.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import ring_strategy as rs


def main() -> None:
    steps = int(sys.argv[1])
    rs.init()
    me, n = rs.rank(), rs.size()
    print(f"pid {me} {os.getpid()}", flush=True)
    x = np.arange(1 << 16, dtype=np.float64)
    try:
        for step in range(steps):
            got = rs.allreduce(x * (me + 1) + step, op=rs.Sum, name="chaos")
            want = x * (n * (n + 1) / 2) + n * step
            assert np.array_equal(got, want), f"step {step}: wrong result"
    except rs.RingError as e:
        print(f"{me}: chaos error {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"{me}: chaos ok", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
