"""A two-rank job in which one rank's clock jumps:
``python clock_jump.py GATE_DIR VICTIM CLOCKS LIBFAKETIME [TAG]``.

Rank VICTIM runs under libfaketime: it executes itself again (same pid)
with ``LD_PRELOAD=LIBFAKETIME`` and its clock offset read from
``GATE_DIR/offset`` (``FAKETIME_TIMESTAMP_FILE``) on every call
(``FAKETIME_NO_CACHE=1``), which the test rewrites mid-job. CLOCKS
``wall`` fakes the wall clock only (``FAKETIME_DONT_FAKE_MONOTONIC=1``),
as when NTP or an administrator steps a host's time; ``all`` fakes the
monotonic clock too.

After a few steps the victim writes ``GATE_DIR/started``; then every rank
allreduces random float32 tensors, checking each result bitwise, until
``GATE_DIR/finish`` exists (the ranks agree on it through an allreduce).
The victim prints ``victim pid <pid> clock steps: wall <max> <min>
monotonic <max> <min>``: the largest forward and backward step, in seconds,
each clock made between two steps (Python reads CLOCK_REALTIME and
CLOCK_MONOTONIC through the same libc calls as the engine). Every rank
prints ``<rank>: ok <steps> steps``, or ``rank <r> caught <Class> at <unix
time>: <message>`` and exits 1. TAG is unused; tests pass a unique one to
find leftover processes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import ring_strategy as rs
from tests.workers.checks import equal

ELEMENTS = 1 << 14
WARMUP_STEPS = 3


def under_faketime(gate: Path, clocks: str, library: str) -> None:
    """Executes this script again under libfaketime, unless it already runs so."""
    if os.environ.get("LD_PRELOAD") == library:
        return
    env = dict(os.environ, LD_PRELOAD=library, FAKETIME_TIMESTAMP_FILE=str(gate / "offset"), FAKETIME_NO_CACHE="1")
    if clocks == "wall":
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def tensor(rank: int, step: int) -> np.ndarray:
    """Rank ``rank``'s input at ``step``: the same on every rank that asks."""
    return np.random.default_rng([rank, step]).standard_normal(ELEMENTS).astype(np.float32)


def run(gate: Path, victim: bool) -> int:
    """Allreduces until the test says finish; returns the number of steps."""
    me, n = rs.rank(), rs.size()
    wall, mono = time.time(), time.monotonic()
    steps_seen = {"wall": [0.0, 0.0], "monotonic": [0.0, 0.0]}  # largest step forward, backward
    step, done = 0, False
    while not done:
        want = sum(tensor(r, step) for r in range(n))  # two ranks: a + b, in either order
        equal(rs.allreduce(tensor(me, step), op=rs.Sum, name=f"clock.{step % 4}"), want, f"step {step}")
        step += 1
        if victim:
            if step == WARMUP_STEPS:
                (gate / "started").touch()
            # Each reading is the next step's baseline: reading the clocks
            # again here would hide a jump made between the two reads.
            now_wall, now_mono = time.time(), time.monotonic()
            for clock, (before, now) in {"wall": (wall, now_wall), "monotonic": (mono, now_mono)}.items():
                seen = steps_seen[clock]
                seen[:] = [max(seen[0], now - before), min(seen[1], now - before)]
            wall, mono = now_wall, now_mono
        finish = step > WARMUP_STEPS and (gate / "finish").exists()
        done = bool(rs.allreduce(np.array([finish], np.uint8), op=rs.Max, name="clock.finish")[0])
    if victim:
        w, m = steps_seen["wall"], steps_seen["monotonic"]
        print(f"victim pid {os.getpid()} clock steps: wall {w[0]:.3f} {w[1]:.3f} monotonic {m[0]:.3f} {m[1]:.3f}",
              flush=True)
    rs.barrier()
    return step


def main() -> None:
    gate, victim, clocks, library = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    is_victim = int(os.environ["RING_RANK"]) == victim
    if is_victim:
        under_faketime(gate, clocks, library)
    rs.init()
    try:
        steps = run(gate, is_victim)
    except rs.RingError as e:
        print(f"rank {rs.rank()} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)
        sys.exit(1)
    print(f"{rs.rank()}: ok {steps} steps", flush=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
