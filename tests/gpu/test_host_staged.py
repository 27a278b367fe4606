"""The host-staged GPU path (native/engine/backends/gpu/host_staged.h) run
for real on the CPU, over the CUDA driver stand-in (stub_cuda.c), at np=2:
every operation and dtype against numpy and bitwise against the CPU path, fusion, the
producer's stream waited for, and clear errors for GPU tensors the engine
cannot take. What it cannot show (real device memory, real streams) is
tests/gpu/device_check.sh's part, on a GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.gpu.stubs import HERE
from tests.jobs import run_ringrun

WORKER = HERE / "workers" / "host_staged_worker.py"


@pytest.mark.parametrize("nccl_on_rank0", [False, True], ids=["no-nccl", "nccl-on-rank0-only"])
def test_host_staged_ops_match_the_cpu_path(stub_driver, stub_nccl, tmp_path, nccl_on_rank0: bool) -> None:
    """With NCCL on rank 0 only, the ranks agree to stage through the host before any
    communicator is made."""
    log, nccl_log = tmp_path / "cuda.log", tmp_path / "nccl.log"
    env = {"RING_CUDA_DRIVER_LIBRARY": str(stub_driver), "STUB_CUDA_LOG": str(log), "STUB_NCCL_LOG": str(nccl_log),
           "STUB_CUDA_DEVICES": "2"}
    args = [sys.executable, WORKER] + ([stub_nccl] if nccl_on_rank0 else [])
    result = run_ringrun(2, args, env=env, timeout=240, merge_output=True)
    assert result.returncode == 0, result.stdout
    assert "OK 0" in result.stdout and "OK 1" in result.stdout
    calls = log.read_text().splitlines()
    records = [c for c in calls if c.startswith("record ")]
    # Every GPU enqueue recorded its ready event on the caller's stream (0xABC0), and the
    # engine's stream waited for each before copying the input out.
    assert records and set(records) == {f"record {0xABC0}"}, set(records)
    waits = [c for c in calls if c.startswith("wait ")]
    assert len(waits) >= len(records) - 2  # bad-input calls record nothing
    assert f"wait {0xABC0}" not in waits  # the caller's stream is never made to wait
    assert any(c.startswith("memcpy ") for c in calls)
    assert not nccl_log.exists()  # no communicator was asked for
    # Issue 40, item 9: the engine's streams have the device's greatest priority (the stand-in's: -5).
    streams = [c for c in calls if c.startswith("stream ")]
    assert streams and set(streams) == {"stream -5"}, streams


def test_gpu_tensor_without_a_gpu_path_is_refused_clearly(tmp_path) -> None:
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import numpy as np, ring_strategy as ring\n"
        "from host_staged_worker import on_gpu\n"
        "from ring_strategy._core import engine\n"
        "ring.init()\n"
        "x = np.ones(4, np.float32)\n"
        "try:\n"
        "    engine.enqueue(engine.ALLREDUCE, 'g', on_gpu(x), on_gpu(x.copy()), engine.DTYPES['float32'], x.shape)\n"
        "except ring.BadArgumentError as e:\n"
        "    print('REFUSED', e, flush=True)\n"
        "class OnGpu:\n"  # what the core API sees of a GPU array: its DLPack device
        "    def __dlpack_device__(self):\n"
        "        return (2, 0)\n"
        "    def __dlpack__(self, **kw):\n"
        "        raise AssertionError('not read')\n"
        "try:\n"
        "    ring.allreduce(OnGpu())\n"
        "except ring.BadArgumentError as e:\n"
        "    print('CORE', e, flush=True)\n"
        "ring.barrier()\n"
    ) % str(HERE / "workers")
    env = {"RING_CUDA_DRIVER_LIBRARY": str(tmp_path / "no-such-libcuda.so")}
    result = run_ringrun(2, [sys.executable, "-c", code], env=env, timeout=120, merge_output=True)
    assert result.returncode == 0, result.stdout
    lines = [line for line in result.stdout.splitlines() if "REFUSED" in line]
    assert len(lines) == 2, result.stdout
    for line in lines:
        assert "allreduce of tensor 'g': no backend for device cuda:0: the CUDA driver " \
               f"(RING_CUDA_DRIVER_LIBRARY={tmp_path / 'no-such-libcuda.so'}) cannot be loaded" in line, line
    core = [line for line in result.stdout.splitlines() if "CORE" in line]
    assert len(core) == 2 and all("an array on a CUDA GPU needs cupy in ring_strategy's core API" in c
                                  for c in core), result.stdout


def _nccl_job(stub_driver: Path, stub_nccl: Path, tmp_path: Path, **extra: str):
    log = tmp_path / "nccl.log"
    env = {"RING_CUDA_DRIVER_LIBRARY": str(stub_driver), "RING_NCCL_LIBRARY": str(stub_nccl),
           "STUB_NCCL_LOG": str(log), "STUB_CUDA_LOG": str(tmp_path / "cuda.log"), **extra}
    worker = HERE / "workers" / "nccl_one_rank_worker.py"
    result = run_ringrun(1, [sys.executable, worker], env=env, timeout=240, merge_output=True)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout
    names = [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []
    return ["ncclCommInitRank" if n == "ncclCommInitRankConfig" else n for n in names]


@pytest.mark.parametrize("streams", [1, 2])
def test_nccl_backend_at_one_rank_matches_the_cpu_path(stub_driver, stub_nccl, tmp_path, streams: int) -> None:
    calls = _nccl_job(stub_driver, stub_nccl, tmp_path, RING_NUM_NCCL_STREAMS=str(streams))
    # One communicator per lane for the global set, and one for each of the two sets that
    # were given the same id one after the other.
    assert calls.count("ncclCommInitRank") == streams + 2
    # One call per reduction NCCL has: the float sums, averages, maxima and scaled averages
    # (3 x 4), the int32 and uint8 sums and maxima (2 x 2); the int16 ones, the integer
    # averages, the empty tensor and Adasum made none. The three tensors in flight together
    # make one to three (as they were fused).
    assert 16 + 1 + 2 <= calls.count("ncclAllReduce") <= 16 + 3 + 2
    assert calls.count("ncclReduceScatter") == 5 and calls.count("ncclSend") == 6 == calls.count("ncclRecv")
    # Issue 40, item 8: one rank sends as many rows as every other: allgather is ncclAllGather.
    assert calls.count("ncclBroadcast") == 6 and calls.count("ncclAllGather") == 6


def test_nccl_operations_show_in_the_timeline(stub_driver, stub_nccl, tmp_path) -> None:
    from ring_strategy.timeline.trace import load

    trace = tmp_path / "timeline.json"
    _nccl_job(stub_driver, stub_nccl, tmp_path, RING_TIMELINE=str(trace))
    events = load(trace)
    phases = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"NCCL_ALLREDUCE", "NCCL_BROADCAST", "NCCL_ALLGATHER", "NCCL_ALLTOALL", "NCCL_REDUCESCATTER"} <= phases, phases
    # Every operation the finalizer completed was closed, with its dtype and shape.
    opened = [e for e in events if e.get("ph") == "B" and not e["name"].startswith("NEGOTIATE")]
    closed = [e for e in events if e.get("ph") == "E" and "shape" in e.get("args", {})]
    assert len(opened) == len(closed) > 20, (opened[:3], closed[:3])


@pytest.mark.parametrize("async_completion", ["0", "1"])
def test_async_completion_makes_the_callers_stream_wait(stub_driver, stub_nccl, tmp_path, async_completion) -> None:
    """RING_ENABLE_ASYNC_COMPLETION=1: each NCCL operation's handle completes once its work is
    queued, after the caller's stream (0xABC0) was made to wait for it; results are unchanged."""
    calls = _nccl_job(stub_driver, stub_nccl, tmp_path, RING_ENABLE_ASYNC_COMPLETION=async_completion)
    cuda = (tmp_path / "cuda.log").read_text().splitlines()
    caller_waits, enqueued = cuda.count(f"wait {0xABC0}"), cuda.count(f"record {0xABC0}")
    assert calls.count("ncclAllReduce") >= 17
    streams = [c for c in cuda if c.startswith("stream ")]  # the lanes' and the host-staged path's
    assert len(streams) == 2 and set(streams) == {"stream -5"}, streams
    if async_completion == "1":  # one wait per operation NCCL ran (the host-staged ones make none)
        assert 20 <= caller_waits < enqueued, (caller_waits, enqueued)
    else:
        assert caller_waits == 0


def test_gpu_operations_host_keeps_nccl_out(stub_driver, stub_nccl, tmp_path) -> None:
    calls = _nccl_job(stub_driver, stub_nccl, tmp_path, RING_GPU_OPERATIONS="host")
    assert calls == []
