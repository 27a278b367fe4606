"""Builds the CPU stand-ins of the CUDA driver and NCCL (stub_cuda.c,
stub_nccl.c) with the machine's C compiler, for the tests of the engine's
GPU code on machines without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

import pytest

HERE = Path(__file__).resolve().parent


def build_stub(source: str, out_dir: Path, name: str, defines: Sequence[str] = ()) -> Path:
    """Compiles ``HERE/source`` into ``out_dir/name`` (a shared library) with ``-D`` ``defines``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("these tests need a C compiler (cc or gcc) to build the CUDA/NCCL stand-ins")
    out = out_dir / name
    cmd = [compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(HERE / source), *(f"-D{d}" for d in defines), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out
