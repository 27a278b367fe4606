"""ring_strategy.jax_ops inside jax.jit on real ranks: an allreduce whose
result feeds a second one (their order must hold), a grouped allreduce of
two dtypes, a broadcast and an allgather of rank-dependent values (the two
ranks compile different programs), run three times; then an alltoall, a
reducescatter of rows that do not divide evenly, a barrier inside jit and a
join. Prints the path, then "<rank>: jit_ffi ok".
"""

import jax
import jax.numpy as jnp
import numpy as np

import ring_strategy as rs
from ring_strategy import _native_ops, jax_ops
from ring_strategy._core.rules import reducescatter_rows

rs.init()
r, n = rs.rank(), rs.size()


@jax.jit
def step(a, b):
    s = jax_ops.allreduce(a, op=rs.Sum, name="a")
    t = jax_ops.allreduce(s * 2, op=rs.Sum, name="b")
    g = jax_ops.grouped_allreduce([b, a.astype(jnp.int32)], op=rs.Sum, name="g")
    bc = jax_ops.broadcast(a + r, root_rank=n - 1, name="bc")
    ag = jax_ops.allgather(a[:2] + r, name="ag")
    return s, t, g, bc, ag


a = jnp.arange(4.0)
for _ in range(3):
    s, t, g, bc, ag = step(a, jnp.ones(3))
assert np.array_equal(s, n * np.arange(4.0)), s
assert np.array_equal(t, 2 * n * n * np.arange(4.0)), t
assert np.array_equal(g[0], n * np.ones(3)) and g[1].dtype == jnp.int32 and np.array_equal(g[1], n * np.arange(4))
assert np.array_equal(bc, np.arange(4.0) + n - 1), bc
assert np.array_equal(ag, np.concatenate([np.arange(2.0) + k for k in range(n)])), ag
avg = jax.jit(lambda x: jax_ops.allreduce(x, name="avg"))(jnp.full(3, float(r)))
assert np.allclose(avg, (n - 1) / 2), avg


@jax.jit
def scatter(x, odd):
    a2a = jax_ops.alltoall(x + 10 * r, name="a2a")
    token = jax_ops.barrier(name="bar")
    rsum = jax_ops.reducescatter(odd + token[0], op=rs.Sum, name="rs")
    return a2a, rsum


x = jnp.arange(4.0 * n).reshape(2 * n, 2)
odd = jnp.arange(4.0 * n + 2).reshape(2 * n + 1, 2)
for _ in range(2):
    a2a, rsum = scatter(x, odd)
# Rank k sent rows [2r, 2r+2) + 10k to rank r.
assert np.array_equal(a2a, np.concatenate([np.arange(4.0 * n).reshape(2 * n, 2)[2 * r:2 * r + 2] + 10 * k
                                           for k in range(n)])), a2a
lo = sum(reducescatter_rows(2 * n + 1, n, k) for k in range(r))
rows = reducescatter_rows(2 * n + 1, n, r)
assert np.array_equal(rsum, n * np.asarray(odd)[lo:lo + rows]), rsum
try:
    jax_ops.alltoall(jnp.ones(2 * n + 1))
except rs.BadArgumentError as e:
    assert "divisible" in str(e), e
else:
    raise AssertionError("an uneven alltoall passed")
assert int(jax_ops.join()) in range(n)
print(f"{r}: path {_native_ops.describe('jax')}", flush=True)
print(f"{r}: jit_ffi ok", flush=True)
rs.shutdown()
