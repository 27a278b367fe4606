"""JAX collectives through XLA FFI handlers (ring_strategy.jax_ops) inside
jit on real ranks (ringrun -np 2 and, through the forced fallback switch,
the refusal that names it). Keras on JAX uses the same handlers: its fit
tests (tests/keras) run through them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

pytest.importorskip("jax")
WORKER = Path(__file__).parent / "workers" / "jax_ffi_worker.py"


def test_jit_collectives_in_order(run_output):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env.update(OMP_NUM_THREADS="1")
    out = run_output(2, [sys.executable, str(WORKER)], env=env, timeout=180)
    assert set(passed_ranks(out, "jit_ffi")) == {"0", "1"}, out[-6000:]
    assert out.count("native (XLA FFI handlers)") == 2, out[-6000:]


def test_switch_off_names_the_reason():
    code = ("import ring_strategy as rs; from ring_strategy import jax_ops; rs.init()\n"
            "try:\n    jax_ops.allreduce([1.0])\nexcept RuntimeError as e:\n    print('refused:', e)\n")
    env = dict(os.environ, RING_NATIVE_OPS="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "refused:" in done.stdout and "RING_NATIVE_OPS=0" in done.stdout, done.stdout + done.stderr[-2000:]


# Registration as it goes where JAX has a CUDA backend, on this CPU-only JAX: _jax_has_cuda
# answers True (JAX defers a CUDA target until such a backend loads), and a platform with no
# handler (ROCm's "gpu" without CUDA) keeps the clear error.
_PLATFORMS = """
import jax, ring_strategy as rs
from ring_strategy import _native_ops, jax_ops
_native_ops._jax_has_cuda = lambda jax: True
rs.init()
print("platforms", sorted(_native_ops.jax_platforms()), _native_ops.describe("jax"))
print("cpu still runs", float(jax.jit(lambda x: jax_ops.allreduce(x, name="a"))(jax.numpy.ones(2))[0]))
_native_ops.forget()
_native_ops._jax_has_cuda = lambda jax: False
jax.default_backend = lambda: "gpu"
try:
    jax_ops.allreduce([1.0], name="b")
except RuntimeError as e:
    print("refused:", e)
print("fallback", jax_ops.native_group_allreduce([jax.numpy.ones(2)], ["c"], 1, 1.0, 1.0, 0))
"""


def test_cuda_target_registered_where_jax_has_cuda_and_other_platforms_refused():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    done = subprocess.run([sys.executable, "-c", _PLATFORMS], env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "platforms ['cpu', 'gpu'] native (XLA FFI handlers, host and CUDA)" in out, out + done.stderr[-2000:]
    assert "cpu still runs 1.0" in out, out + done.stderr[-2000:]
    assert "refused: ring's JAX collectives have no handler for the platform JAX computes on (gpu; they run on " \
           "['cpu'])" in out, out + done.stderr[-2000:]
    assert "fallback None" in out, out + done.stderr[-2000:]
