"""The CUDA XLA FFI handler's logic (native/frameworks/xla/collective_call.h,
run_on_stream: what JAX's and TensorFlow's GPU programs call) run for real
on the CPU over the CUDA and NCCL stand-ins, at one and two ranks, on NCCL
with and without RING_ENABLE_ASYNC_COMPLETION and staged through host
memory: results against numpy, and, from the stand-in driver's log, the
stream contract: the engine's work waits for an event recorded on XLA's
stream, and on NCCL XLA's stream waits for the work's event before the copy
of an engine-allocated result is queued on it (the strict stand-in refuses
a wait on an unrecorded event).
What it cannot show (XLA itself calling the handler, real streams) is
tests/gpu/device_check.sh's part, on a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.gpu.stubs import HERE
from tests.jobs import run_ringrun

WORKER = HERE / "workers" / "xla_stream_worker.py"
STREAM = f"{0x5A10}"  # the worker's stand-in for XLA's stream


def _segments(log: Path) -> Dict[str, List[str]]:
    """The driver calls of each of the worker's marked calls, by label."""
    out: Dict[str, List[str]] = {}
    label = None
    for line in log.read_text().splitlines():
        if line.startswith("mark "):
            label = line.split()[1]
            out[label] = []
        elif label is not None:
            out[label].append(line)
    return out


@pytest.mark.parametrize("np_", [1, 2])
@pytest.mark.parametrize("mode", ["nccl", "nccl-async", "host"])
def test_xla_cuda_handler_runs_on_xlas_stream(stub_driver, stub_nccl, tmp_path, np_: int, mode: str) -> None:
    """On NCCL the handler's operations complete at enqueue whatever RING_ENABLE_ASYNC_COMPLETION
    says: XLA's stream waits for the work's event. Staged through host memory
    (RING_GPU_OPERATIONS=host) they complete once the results are back, and XLA's stream is
    never made to wait."""
    log = tmp_path / "cuda.log"
    env = {"RING_CUDA_DRIVER_LIBRARY": str(stub_driver), "RING_NCCL_LIBRARY": str(stub_nccl),
           "STUB_CUDA_DEVICES": str(np_), "STUB_CUDA_LOG": str(log), "STUB_NCCL_LOG": str(tmp_path / "nccl.log"),
           "RING_ENABLE_ASYNC_COMPLETION": "1" if mode == "nccl-async" else "0",
           "RING_GPU_OPERATIONS": "host" if mode == "host" else "nccl"}
    result = run_ringrun(np_, [sys.executable, WORKER], env=env, timeout=180, merge_output=True)
    assert result.returncode == 0, result.stdout
    for rank in range(np_):
        assert f"OK {rank}" in result.stdout, result.stdout
        calls = _segments(Path(f"{log}.{rank}"))
        for label in ("allreduce", "average", "allgather", "broadcast", "reducescatter", "alltoall"):
            seg = calls[label]
            # The engine's work waited for the producer: an event recorded on XLA's stream first.
            assert seg and seg[0] == f"record {STREAM}", (label, seg)
            waits = [i for i, c in enumerate(seg) if c == f"wait {STREAM}"]
            assert bool(waits) == (mode != "host"), (label, seg)
        for label in ("allgather", "alltoall"):  # engine-allocated results, copied on XLA's stream
            seg = calls[label]
            copies = [i for i, c in enumerate(seg) if c.startswith("memcpy ")]
            assert copies, (label, seg)
            if mode != "host":
                assert seg.index(f"wait {STREAM}") < copies[-1], (label, seg)
        assert calls["barrier"] == [], calls["barrier"]  # refused before anything was queued
    assert (tmp_path / "nccl.log").exists() == (mode != "host")
