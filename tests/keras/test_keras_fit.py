"""keras_callbacks on two real workers (ringrun -np 2), once per Keras backend.

One ringrun per backend runs every check of workers/fit_worker.py (importing
TensorFlow or JAX is the slow part); each test then looks for its
"<rank>: <check> ok" line on both ranks. The worker's rank 0 compares the
distributed fit with a single-process fit on the global batch.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "fit_worker.py"
# JAX and torch cost 17 s and 26 s of make test's budget: slow-marked (pytest -m slow);
# tests/keras/test_keras_surface.py runs every backend in make test. "-host": the
# forced fallback to host calls (RING_NATIVE_OPS=0) instead of the native operations.
BACKENDS = ["tensorflow", "tensorflow-host", pytest.param("jax", marks=pytest.mark.slow),
            pytest.param("jax-host", marks=pytest.mark.slow), pytest.param("torch", marks=pytest.mark.slow)]
CHECKS = ["config", "fit", "schedule", "save_load", "compression", "accumulation", "sharding", "callbacks_namespace", "unbuilt",
          "validation"]
_runs: dict = {}


def _run(run_output, backend: str, tmp_dir: Path, timeout: float = 240) -> str:
    """Output of the worker under ringrun -np 2 with this backend (run once)."""
    if backend not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
        env.update(KERAS_BACKEND=backend.split("-")[0], TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1",
                   HANG_DUMP=str(int(timeout - 20)), **({"RING_NATIVE_OPS": "0"} if backend.endswith("-host") else {}))
        out_dir = tmp_dir / backend
        out_dir.mkdir(parents=True, exist_ok=True)
        _runs[backend] = run_output(2, [sys.executable, str(WORKER), str(out_dir)], env=env, timeout=timeout)
    return _runs[backend]


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("keras")


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_check(backend, check, out_root, run_output):
    out = _run(run_output, backend, out_root)
    for rank in range(2):
        assert re.search(rf"^(\[{rank}\] )?{rank}: {check} ok\b", out, re.M), f"{backend}/{check}:\n{out[-8000:]}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_single_process_reference(backend, out_root, run_output):
    out = _run(run_output, backend, out_root)
    assert re.search(r"^(\[0\] )?0: reference ok", out, re.M), out[-8000:]


@pytest.mark.parametrize("backend", ["tensorflow", "tensorflow-host"])
def test_tensorflow_jit_compile(backend, out_root, run_output):
    """Trains through ring's XLA custom call; on host calls, a clear error."""
    out = _run(run_output, backend, out_root)
    for rank in range(2):
        assert re.search(rf"^(\[{rank}\] )?{rank}: jit_compile ok$", out, re.M), out[-8000:]


@pytest.mark.parametrize("backend", BACKENDS[:4])
def test_collectives_path(backend, out_root, run_output):
    """The native operations by default; host calls with RING_NATIVE_OPS=0."""
    out = _run(run_output, backend, out_root)
    expected = "host calls (RING_NATIVE_OPS=0" if backend.endswith("-host") else "native ("
    assert re.search(rf"^(\[0\] )?0: collectives {re.escape(expected)}", out, re.M), out[-8000:]


@pytest.mark.slow
def test_torch_jit_compile_trains(out_root, run_output):
    out = _run(run_output, "torch", out_root)
    for rank in range(2):
        assert re.search(rf"^(\[{rank}\] )?{rank}: torch_compile ok\b", out, re.M), out[-8000:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_code(backend, out_root, run_output):
    out = _run(run_output, backend, out_root)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
