"""ring's collectives inside XLA-compiled TensorFlow (jit_compile=True),
through the op library's RingXlaCollective lowering: one compiled function
with 20 allreduces of five dtypes, a grouped allreduce, an allgather and a
broadcast (chained in traced order, so the ranks submit them alike); the
gradient of an allreduce; an allgather of unequal rows ends with a clear
error on every rank; a reducescatter of rows that do not divide evenly, an
alltoall of even blocks, and both their gradients. Prints "<rank>: <check>
ok" for each check.
"""

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd
from tests.workers.checks import raises

hvd.init()
n, me = hvd.size(), hvd.rank()
DTYPES = [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16]


@tf.function(jit_compile=True)
def many(offset):
    terms = []
    for i in range(20):
        x = tf.cast(tf.range(8) + offset + i, DTYPES[i % 5])
        terms.append(tf.reduce_sum(tf.cast(hvd.allreduce(x, op=hvd.Sum), tf.float64)))
    grouped = hvd.grouped_allreduce([tf.fill([3], tf.cast(offset, tf.float32)), tf.ones([2, 2], tf.float64)])
    terms += [tf.reduce_sum(tf.cast(g, tf.float64)) for g in grouped]
    terms.append(tf.reduce_sum(tf.cast(hvd.allgather(tf.fill([2], tf.cast(offset, tf.float32))), tf.float64)))
    terms.append(tf.reduce_sum(tf.cast(hvd.broadcast(tf.fill([1], offset + 5), root_rank=n - 1), tf.float64)))
    return tf.add_n(terms)


expected = sum(float(np.sum(n * (np.arange(8) + i) + n * (n - 1) / 2)) for i in range(20))
expected += 3 * (n - 1) / 2 + 4 + 2 * n * (n - 1) / 2 + (n - 1 + 5)
hlo = many.experimental_get_compiler_ir(tf.constant(me))(stage="hlo")
assert hlo.count("ring_collective") == 23, hlo.count("ring_collective")
for _ in range(3):
    got = float(many(tf.constant(me)))
    assert abs(got - expected) < 1e-6 * expected, (got, expected)
print(f"{me}: many ok", flush=True)

w = tf.Variable([1.0, 2.0])


@tf.function(jit_compile=True)
def grad():
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(hvd.allreduce(w * (me + 1.0), op=hvd.Average))
    return tape.gradient(y, w)


# d/dw of sum(mean over ranks of w * (rank + 1)) = (me + 1) * mean over ranks of 1
np.testing.assert_allclose(grad().numpy(), [me + 1.0] * 2)
print(f"{me}: gradient ok", flush=True)

unequal = tf.function(lambda: hvd.allgather(tf.ones([me + 1])), jit_compile=True)
raises(Exception, unequal, "allgather of unequal rows")
print(f"{me}: unequal_rows ok", flush=True)
odd = tf.reshape(tf.range(2.0 * (2 * n + 1)), [2 * n + 1, 2])
v = tf.Variable(tf.reshape(tf.range(4.0 * n), [2 * n, 2]))


@tf.function(jit_compile=True)
def scatter():
    with tf.GradientTape() as tape:
        rs = hvd.reducescatter(odd + me, op=hvd.Sum)
        a2a, received = hvd.alltoall(v * (me + 1.0))
        halves = hvd.reducescatter(v, op=hvd.Average)
        loss = tf.reduce_sum(a2a) + tf.reduce_sum(halves * (me + 1.0))
    return rs, a2a, received, tape.gradient(loss, v)


rs, a2a, received, dv = scatter()
lo = sum(2 * n // n + (k < 1) for k in range(me))
rows = (2 * n + 1) // n + (me < 1)
np.testing.assert_array_equal(rs.numpy(), n * odd.numpy()[lo:lo + rows] + n * (n - 1) / 2)
vs = v.numpy()
np.testing.assert_array_equal(a2a.numpy(), np.concatenate([vs[2 * me:2 * me + 2] * (k + 1) for k in range(n)]))
np.testing.assert_array_equal(received.numpy(), [2] * n)
# d(sum of the alltoall)/dv = me + 1; d(sum(halves * (me + 1)))/dv = (k + 1) / n on rank k's rows of every rank.
want = np.full_like(vs, me + 1.0)
for k in range(n):
    want[2 * k:2 * k + 2] += (k + 1.0) / n
np.testing.assert_allclose(dv.numpy(), want)
print(f"{me}: scatter ok", flush=True)
hvd.shutdown()
