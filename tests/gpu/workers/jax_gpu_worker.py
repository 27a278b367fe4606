"""ring's JAX collectives inside jax.jit on CUDA arrays (tests/gpu/
device_check.sh): the CUDA XLA FFI handler (native/frameworks/xla/
collective_ffi.cc) must be the one XLA calls, with XLA's stream handed to
the engine's NCCL path (not host memory, not io_callback).

Checks, on this rank's GPU: a jitted allreduce (Sum, Average), a grouped
allreduce of two dtypes, allgather, broadcast, reducescatter and alltoall,
two chained collectives whose order must hold, and results consumed by
later GPU work in the same program (the stream contract). NCCL must be
loaded (RING_GPU_OPERATIONS=host is not set by the check), so the engine
runs them on NCCL. Prints "[rank] jax gpu: OK".
"""

from __future__ import annotations

import os

import numpy as np

import jax
import jax.numpy as jnp

import ring_strategy as rs
from ring_strategy import _native_ops, jax_ops
from ring_strategy.build_queries import nccl_built


def main() -> None:
    rs.init()
    me, n = rs.rank(), rs.size()
    assert jax.default_backend() == "gpu", jax.default_backend()
    assert "gpu" in _native_ops.jax_platforms(), _native_ops.describe("jax")
    dev = jax.local_devices()[rs.local_rank() % jax.local_device_count()]
    put = lambda a: jax.device_put(a, dev)  # noqa: E731

    @jax.jit
    def step(x, i):
        s = jax_ops.allreduce(x * 2.0, op=rs.Sum, name="sum")
        a = jax_ops.allreduce(s + 1.0, name="avg")  # ordered after "sum" by its data
        g = jax_ops.grouped_allreduce([x, i], op=rs.Sum, name="grp")
        ag = jax_ops.allgather(x[:2], name="ag")
        bc = jax_ops.broadcast(x, root_rank=n - 1, name="bc")
        rsc = jax_ops.reducescatter(jnp.tile(x[:2], (n, 1)), op=rs.Sum, name="rsc")
        a2a = jax_ops.alltoall(jnp.tile(x[:1], (n, 1)) + jnp.arange(n, dtype=x.dtype)[:, None], name="a2a")
        return jnp.sin(s) + 0.0, a * 3.0, g, ag, bc, rsc, a2a  # later GPU work reads the results

    x = put(jnp.arange(8, dtype=jnp.float32).reshape(2, 4) + me)
    i = put(jnp.full((3,), me, jnp.int32))
    for _ in range(3):  # compiled once, run again: the same names every run
        s, a, (g, gi), ag, bc, rsc, a2a = step(x, i)
    base = np.arange(8, dtype=np.float32).reshape(2, 4)
    want_s = sum(2 * (base + r) for r in range(n))
    np.testing.assert_allclose(np.asarray(s), np.sin(want_s), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(a), (want_s + 1) * 3, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(g), sum(base + r for r in range(n)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(gi), np.full(3, sum(range(n)), np.int32))
    np.testing.assert_array_equal(np.asarray(ag), np.concatenate([base + r for r in range(n)]))
    np.testing.assert_array_equal(np.asarray(bc), base + n - 1)
    np.testing.assert_allclose(np.asarray(rsc), sum(base + r for r in range(n)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(a2a), np.stack([(base[0] + r) + me for r in range(n)]))
    assert all(d.platform == "gpu" for d in s.devices()), s.devices()
    assert nccl_built() > 0 and os.environ.get("RING_GPU_OPERATIONS", "") != "host", "not through NCCL"
    rs.shutdown()
    print(f"[{me}] jax gpu: OK", flush=True)


if __name__ == "__main__":
    main()
