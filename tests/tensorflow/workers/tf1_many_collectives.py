"""One TF1 session.run of many independent collectives: 20 allreduces of
five dtypes, an allgather, a broadcast and a reducescatter, summed into one
result. With the op library no TensorFlow thread waits for a collective,
so the session's inter-op threads may run them in any order on every rank
(the host-call fallback could hang here: each blocking call held a thread).
Prints which path ran, then "<rank>: many_collectives ok".
"""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import ring_strategy.tensorflow as hvd  # noqa: E402
from ring_strategy import _native_ops  # noqa: E402

hvd.init()
n, me = hvd.size(), hvd.rank()
DTYPES = [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16]
terms = []
for i in range(20):
    x = tf.constant(np.arange(8) + me + i, dtype=DTYPES[i % 5])
    terms.append(tf.reduce_sum(tf.cast(hvd.allreduce(x, op=hvd.Sum), tf.float64)))
terms.append(tf.reduce_sum(tf.cast(hvd.allgather(tf.fill([me + 1], 1.0)), tf.float64)))
terms.append(tf.reduce_sum(tf.cast(hvd.broadcast(tf.constant([float(me + 5)]), root_rank=n - 1), tf.float64)))
terms.append(tf.reduce_sum(tf.cast(hvd.reducescatter(tf.ones([2 * n, 3]), op=hvd.Sum), tf.float64)))
total = tf.add_n(terms)
expected = sum(float(np.sum(n * (np.arange(8) + i) + n * (n - 1) / 2)) for i in range(20))
expected += n * (n + 1) / 2 + (n - 1 + 5) + 2 * 3 * n
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=1)
with tf.compat.v1.Session(config=config) as session:
    for _ in range(5):
        got = session.run(total)
        assert abs(got - expected) < 1e-6 * expected, (got, expected)
print(f"{me}: path {_native_ops.describe('tensorflow')}", flush=True)
print(f"{me}: many_collectives ok", flush=True)
hvd.shutdown()
