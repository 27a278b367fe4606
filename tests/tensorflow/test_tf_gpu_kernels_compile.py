"""The op library's GPU kernels (compiled only where TensorFlow was built
with CUDA, never on this machine's CPU TensorFlow) still compile: each
source is checked with ``-fsyntax-only -DGOOGLE_CUDA=1`` and the real
build's flags (ring_strategy._op_build.compile_command) against the
installed TensorFlow's headers. Slow-marked (about 20 s of compiler time):
``make slow-test``, or ``pytest -m slow tests/tensorflow/test_tf_gpu_kernels_compile.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

NATIVE = Path(__file__).resolve().parents[2] / "native"


@pytest.mark.slow
def test_gpu_kernels_compile_with_google_cuda():
    from ring_strategy import _op_build

    sources = _op_build.TF_SOURCES + _op_build.XLA_SOURCES
    procs = {}
    for src in sources:
        cmd = _op_build.compile_command(src, Path("unused.o"), NATIVE)
        cmd = [c for c in cmd[:cmd.index("-o")] if c != "-c"] + ["-fsyntax-only", "-DGOOGLE_CUDA=1"]
        procs[src] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    failed = {src: p.communicate()[1][-4000:] for src, p in procs.items() if p.wait() != 0}
    assert not failed, failed
