"""The CPU stand-ins of the CUDA driver and NCCL, built once per session for
the tests that run the engine's GPU backends on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.stubs import build_stub


@pytest.fixture(scope="session")
def stub_driver(tmp_path_factory) -> Path:
    return build_stub("stub_cuda.c", tmp_path_factory.mktemp("cuda_stub"), "libcuda_stub.so")


@pytest.fixture(scope="session")
def stub_nccl(tmp_path_factory) -> Path:
    return build_stub("stub_nccl.c", tmp_path_factory.mktemp("nccl_stub"), "libnccl_stub.so")
