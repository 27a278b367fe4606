"""A man in the middle on an encrypted link (``RING_ENCRYPT=1``): tampering
and replay end the job on every rank, never with a wrong number.

A two-rank job over TCP (workers/tamper_job.py) has rank 1 dial rank 0
through a proxy in this process (mitm_proxy.py), on both meshes. The proxy
forwards the handshake and the first frames faithfully, then:

- ``flip``: flips one bit of a data frame's ciphertext going to rank 1;
- ``replay``: sends a control frame going to rank 0 (the coordinator) a
  second time, just before the next one.

The rank that receives the altered frame fails its link to the sender,
and the job stops: every rank raises ``PeerFailureError`` naming the
sender's link ("lost rank S (...): an encrypted frame from a peer failed
authentication ...") within the deadline of the fault, and nothing is left
behind. Each rank's message names the other end of the link and its host:
the rank that saw the failure says "lost rank S (host, pid ...)", the
others read its cause under its name ("rank R (host, pid ...) lost rank S
...", or "on rank R (...): ..."), never "lost rank S" on rank S. A faithful proxy shows the link itself is transparent: every
result bitwise right.

The same proxy also impairs the link, where the kernel has no netem:

- ``delay`` (5 ms +- 1 ms on every data frame to rank 1) and ``cap`` (data
  to rank 0 paced to 200 Mbit/s): every result stays bitwise right; the
  job's cost is printed;
- ``stall`` (data to rank 1 stops, the connection stays open) and
  ``reset`` (RST in the middle of a data frame): every rank raises an
  error naming the peer and its host within the deadline
  (``RingTimeoutError`` after ``RING_TIMEOUT_SECONDS`` for the stall,
  ``PeerFailureError`` for the reset).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest
from mitm_proxy import MESHES, TO_ACCEPTOR, TO_DIALER, Fault, Proxy, Upstream
from reliability_jobs import WORKERS, JobResult, finish, start_job_tagged

WORKER = WORKERS / "tamper_job.py"
NP = 2
STEPS = 40
DEADLINE_SECONDS = 10.0
ENV = {"RING_TRANSPORT": "tcp", "RING_ENCRYPT": "1", "RING_TIMEOUT_SECONDS": "3"}
FAULTS = {
    "flip": Fault("flip", "data", TO_DIALER, after=12),
    "replay": Fault("replay", "control", TO_ACCEPTOR, after=12),
}
IMPAIRED = {
    "delay": Fault("delay", "data", TO_DIALER, after=0, delay_ms=5.0, jitter_ms=1.0),
    "cap": Fault("cap", "data", TO_ACCEPTOR, after=0, mbit=200.0),
}
BROKEN = {
    "stall": Fault("stall", "data", TO_DIALER, after=12),
    "reset": Fault("reset", "data", TO_DIALER, after=12),
}
# What each rank raises: a stalled transfer makes no progress (the control
# mesh's heartbeats still arrive); a reset link is a lost peer.
BROKEN_ERROR = {"stall": ("RingTimeoutError", "no progress for 3 s"), "reset": ("PeerFailureError", "lost rank ")}
SENDER = {TO_DIALER: 0, TO_ACCEPTOR: 1}  # the rank an altered frame claims to come from

_runs: Dict[Optional[str], Tuple[JobResult, Proxy, float]] = {}


def _names_the_other_end(rank: int, message: str) -> bool:
    """``message``, raised on ``rank``, names the link's other end with its
    host, and names ``rank`` as lost only as another rank saw it."""
    other = f"rank {1 - rank} ({socket.gethostname()}, pid "
    return other in message and not message.startswith(f"lost rank {rank} ")


def _upstream(gate: Path) -> Upstream:
    """The proxy's way to rank 0's real listeners, from the endpoints rank 1 wrote."""
    def where(mesh: str) -> Tuple[str, int]:
        line = json.loads((gate / "endpoints.json").read_text())[0].split("\n")[MESHES.index(mesh)]
        return "127.0.0.1", int(re.search(r";port=(\d+)", line)[1])
    return where


def _run(fault: Optional[str]) -> Tuple[JobResult, Proxy]:
    """The job through a proxy with ``fault`` (None: faithful), run once per module."""
    return _timed(fault)[:2]


def _timed(fault: Optional[str]) -> Tuple[JobResult, Proxy, float]:
    """:func:`_run`, with the job's wall time in seconds."""
    if fault not in _runs:
        gate = Path(tempfile.mkdtemp(prefix="ring-tamper-"))
        proxy = Proxy(_upstream(gate), {**FAULTS, **IMPAIRED, **BROKEN}.get(fault))
        try:
            start = time.monotonic()
            proc, tag = start_job_tagged(NP, [WORKER, gate, proxy.ports["data"], proxy.ports["control"], STEPS],
                                         env=ENV)
            _runs[fault] = (finish(proc, tag, timeout=30), proxy, time.monotonic() - start)
        finally:
            proxy.close()
            shutil.rmtree(gate, ignore_errors=True)
    return _runs[fault]


def test_faithful_proxy_gives_bitwise_correct_results() -> None:
    job, proxy = _run(None)
    assert job.returncode == 0, job.tail()
    assert all(f"{r}: ok {STEPS} steps" in job.output for r in range(NP)), job.tail()
    assert all(count > 0 for count in proxy.frames.values()), proxy.frames  # both meshes, both ways
    assert proxy.errors == [] and proxy.fault_at is None


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_altered_frame_ends_the_job_on_every_rank(fault: str) -> None:
    job, proxy = _run(fault)
    f = FAULTS[fault]
    assert proxy.fault_at is not None, f"the proxy saw only {proxy.frames} frames:\n{job.tail()}"
    assert "AssertionError" not in job.output and " ok " not in job.output, job.tail()  # no wrong number
    assert job.returncode != 0, job.tail()
    caught = job.caught()
    assert sorted(caught) == list(range(NP)), job.tail()
    for rank, err in caught.items():
        took = err.at - proxy.fault_at
        print(f"{fault}: rank {rank} raised {err.cls} {took:.3f} s after the fault: {err.message}")
        assert err.cls == "PeerFailureError", job.tail()
        assert f"lost rank {SENDER[f.direction]} (" in err.message, job.tail()
        assert "failed authentication" in err.message, job.tail()
        assert _names_the_other_end(rank, err.message), job.tail()
        assert took < DEADLINE_SECONDS, job.tail()


@pytest.mark.parametrize("fault", sorted(IMPAIRED))
def test_delayed_or_capped_link_keeps_every_result_exact(fault: str) -> None:
    job, proxy, took = _timed(fault)
    assert job.returncode == 0, job.tail()
    assert all(f"{r}: ok {STEPS} steps" in job.output for r in range(NP)), job.tail()
    assert proxy.fault_at is not None and proxy.errors == [], (proxy.frames, proxy.errors)
    clean = _timed(None)[2]
    frames = proxy.frames[IMPAIRED[fault].mesh, IMPAIRED[fault].direction]
    print(f"{fault}: the job took {took:.2f} s against {clean:.2f} s through a faithful proxy "
          f"({(took - clean) / STEPS * 1e3:.1f} ms a step, {frames} frames impaired)")


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_stalled_or_reset_link_ends_the_job_on_every_rank(fault: str) -> None:
    job, proxy = _run(fault)
    assert proxy.fault_at is not None, f"the proxy saw only {proxy.frames} frames:\n{job.tail()}"
    assert "AssertionError" not in job.output and " ok " not in job.output, job.tail()
    caught = job.caught()
    assert sorted(caught) == list(range(NP)), job.tail()
    for rank, err in caught.items():
        took = err.at - proxy.fault_at
        print(f"{fault}: rank {rank} raised {err.cls} {took:.3f} s after the fault: {err.message}")
        cls, text = BROKEN_ERROR[fault]
        assert err.cls == cls and text in err.message, job.tail()
        assert _names_the_other_end(rank, err.message), job.tail()  # the peer and its host
        assert took < DEADLINE_SECONDS, job.tail()


@pytest.mark.parametrize("fault", [None, *sorted(FAULTS), *sorted(IMPAIRED), *sorted(BROKEN)])
def test_nothing_left_behind(fault: Optional[str]) -> None:
    job, _ = _run(fault)
    assert job.job_id is not None, job.tail()
    assert job.leftover_processes == [] and job.leftover_segments == [], job.tail()
