"""The host-staged GPU path (native/gpu/host_staged.h) run for real on the
CPU, over the CUDA driver stand-in (stub_cuda.c), at np=2: every operation
and dtype against numpy and bitwise against the CPU path, fusion, the
producer's stream waited for, and clear errors for GPU tensors the engine
cannot take. What it cannot show (real device memory, real streams) is
tests/gpu/device_check.sh's part, on a GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.gpu.stubs import HERE, build_stub
from tests.jobs import run_ringrun

WORKER = HERE / "workers" / "host_staged_worker.py"


@pytest.fixture(scope="module")
def stub_driver(tmp_path_factory) -> Path:
    return build_stub("stub_cuda.c", tmp_path_factory.mktemp("cuda_stub"), "libcuda_stub.so")


def test_host_staged_ops_match_the_cpu_path(stub_driver, tmp_path) -> None:
    log = tmp_path / "cuda.log"
    env = {"RING_CUDA_DRIVER_LIBRARY": str(stub_driver), "STUB_CUDA_LOG": str(log)}
    result = run_ringrun(2, [sys.executable, WORKER], env=env, timeout=240, merge_output=True)
    assert result.returncode == 0, result.stdout
    assert "OK 0" in result.stdout and "OK 1" in result.stdout
    calls = log.read_text().splitlines()
    records = [c for c in calls if c.startswith("record ")]
    # Every GPU enqueue recorded its ready event on the caller's stream (0xABC0), and the
    # engine's stream waited for each before copying the input out.
    assert records and set(records) == {f"record {0xABC0}"}, set(records)
    assert sum(c == "wait 0" for c in calls) >= len(records) - 2  # bad-input calls record nothing
    assert any(c.startswith("memcpy ") for c in calls)


def test_gpu_tensor_without_a_gpu_path_is_refused_clearly(tmp_path) -> None:
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import numpy as np, ring_strategy as ring\n"
        "from host_staged_worker import on_gpu\n"
        "from ring_strategy import _frontend\n"
        "ring.init()\n"
        "x = np.ones(4, np.float32)\n"
        "try:\n"
        "    _frontend.enqueue(_frontend.ALLREDUCE, 'g', on_gpu(x), on_gpu(x.copy()), _frontend.DTYPES['float32'], x.shape)\n"
        "except ring.BadArgumentError as e:\n"
        "    print('REFUSED', e, flush=True)\n"
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
