"""A two-rank job whose link runs through a test's man in the middle:
``python tamper_job.py GATE_DIR DATA_PORT CONTROL_PORT STEPS [TAG]``.

Run with ``RING_TRANSPORT=tcp`` and ``RING_ENCRYPT=1``. Rank 1 dials rank 0
(a rank dials the lower ranks); before connecting it writes every rank's
endpoints to ``GATE_DIR/endpoints.json`` (so the proxy knows where to
relay) and dials rank 0's data and control listeners at the proxy's ports
on loopback instead, as a redirect on the network would have it. Nothing
else changes: the engine's handshake and encryption run end to end through
the proxy (tests/reliability/mitm_proxy.py).

Every rank then allreduces STEPS random float32 tensors and checks each
result bitwise against the sum it computes itself, and prints ``<rank>: ok
<steps> steps``. An engine error is reported as ``rank <r> caught <Class>
at <unix time>: <message>`` and the rank exits 1. The ranks ignore SIGTERM,
so that what they print comes from the engine, not from ringrun stopping
them. TAG is unused; tests pass a unique one to find leftover processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import List

import numpy as np

import ring_strategy as rs
from ring_strategy import _native
from tests.workers.checks import equal

ELEMENTS = 1 << 15  # 128 KiB of float32: a few frames per direction and step


class RedirectedRuntime(_native.Runtime):
    """The engine's runtime, dialing rank 0 at the proxy's ports."""

    gate: Path
    proxy_ports: List[int]  # data, control

    def connect(self, endpoints: list) -> None:
        written = self.gate / "endpoints.json.partial"
        written.write_text(json.dumps(list(endpoints)))
        written.rename(self.gate / "endpoints.json")  # the proxy never reads half a file
        lines = endpoints[0].split("\n")  # rank 0's data and control endpoints, then its CPUs and host
        endpoints = list(endpoints)
        redirected = [re.sub(r";port=\d+", f";port={port}", line) for line, port in zip(lines, self.proxy_ports)]
        endpoints[0] = "\n".join(redirected + lines[len(redirected):])
        super().connect(endpoints)


def tensor(rank: int, step: int) -> np.ndarray:
    """Rank ``rank``'s input at ``step``: the same on every rank that asks."""
    return np.random.default_rng([rank, step]).standard_normal(ELEMENTS).astype(np.float32)


def main() -> None:
    gate, data_port, control_port, steps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if int(os.environ["RING_RANK"]) == 1:
        RedirectedRuntime.gate, RedirectedRuntime.proxy_ports = gate, [data_port, control_port]
        _native.Runtime = RedirectedRuntime  # what ring_strategy.init() instantiates
    rs.init()
    me, n = rs.rank(), rs.size()
    try:
        for step in range(steps):
            want = sum(tensor(r, step) for r in range(n))  # two ranks: a + b, in either order
            equal(rs.allreduce(tensor(me, step), op=rs.Sum, name=f"tamper.{step % 4}"), want, f"step {step}")
        rs.barrier()
    except rs.RingError as e:
        print(f"rank {me} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)
        sys.exit(1)
    print(f"{me}: ok {steps} steps", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
