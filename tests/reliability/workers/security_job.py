"""A job that holds still at two points so that a test can attack the ports
it listens on: ``python security_job.py GATE_DIR [TAG]``.

1. Connection setup. The last rank publishes its endpoints, writes every
   rank's endpoints to ``GATE_DIR/endpoints.json`` (so the test knows
   which port is which) and waits for ``GATE_DIR/connect`` before
   connecting, so the other ranks sit in their connection phase while the
   test's strangers knock. Every rank prints ``<rank>: connected``.
2. Running. Every rank allreduces, checking each result, until
   ``GATE_DIR/finish`` exists, while the test attacks the rendezvous store.

Each rank ends with ``<rank>: ok <steps> steps`` when every result was right.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import ring_strategy as rs
from ring_strategy import _native
from tests.workers.checks import equal

GATE_TIMEOUT_SECONDS = 90.0


def wait_for(path: Path) -> None:
    """Blocks until ``path`` exists (the test's signal)."""
    deadline = time.monotonic() + GATE_TIMEOUT_SECONDS
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {path}")
        time.sleep(0.05)


class GatedRuntime(_native.Runtime):
    """The engine's runtime, connecting only once the test opens the gate."""

    gate: Path

    def connect(self, endpoints: list) -> None:
        written = self.gate.parent / "endpoints.json.partial"
        written.write_text(json.dumps(list(endpoints)))
        written.rename(self.gate.parent / "endpoints.json")  # the test never reads half a file
        wait_for(self.gate)
        super().connect(endpoints)


def main() -> None:
    gate_dir = Path(sys.argv[1])
    if int(os.environ["RING_RANK"]) == int(os.environ["RING_SIZE"]) - 1:
        GatedRuntime.gate = gate_dir / "connect"
        _native.Runtime = GatedRuntime  # what ring_strategy.init() instantiates
    rs.init()
    n, me = rs.size(), rs.rank()
    print(f"{me}: connected", flush=True)
    steps, done = 0, False
    while not done:
        x = np.arange(1000, dtype=np.float64) * (me + 1) + steps
        want = np.arange(1000, dtype=np.float64) * (n * (n + 1) / 2) + n * steps
        equal(rs.allreduce(x, op=rs.Sum, name=f"secure.{steps % 8}"), want, f"step {steps}")
        steps += 1
        finish = steps >= 20 and (gate_dir / "finish").exists()
        done = bool(rs.allreduce(np.array([finish], np.uint8), op=rs.Max, name="secure.finish")[0])
        time.sleep(0.01)
    rs.barrier()
    print(f"{me}: ok {steps} steps", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
