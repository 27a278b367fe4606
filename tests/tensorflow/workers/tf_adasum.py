"""op=Adasum in ring_strategy.tensorflow, checked against
tests/workers/adasum_reference.py: scenarios that tf_worker.py imports and
runs with its own (tests/tensorflow/test_tensorflow.py lists them)."""

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd
from tests.workers.adasum_reference import adasum
from tests.workers.checks import close, raises


def value(r, t):
    shared = np.random.default_rng(10 + t).standard_normal(5 + 4 * t)
    own = np.random.default_rng(100 * r + t).standard_normal(5 + 4 * t)
    return (10.0 ** t * (shared + 0.5 * own)).astype(np.float32)


def want(t):
    return adasum([value(r, t) for r in range(hvd.size())]).astype(np.float32)


def scenario_adasum_allreduce():
    r = hvd.rank()
    close(hvd.allreduce(tf.constant(value(r, 0)), op=hvd.Adasum), want(0), "eager", rtol=1e-5)
    close(tf.function(lambda x: hvd.allreduce(x, op=hvd.Adasum))(tf.constant(value(r, 1))), want(1),
          "tf.function", rtol=1e-5)
    outs = hvd.grouped_allreduce([tf.constant(value(r, t)) for t in range(3)], op=hvd.Adasum)
    for t, out in enumerate(outs):
        close(out, want(t), f"grouped {t}", rtol=1e-5, atol=1e-5 * 10.0 ** t)


def scenario_adasum_gradient():
    """The gradient of an Adasum allreduce is the Adasum allreduce of the incoming gradient."""
    r = hvd.rank()
    x = tf.constant(value(r, 0))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = hvd.allreduce(x, op=hvd.Adasum)
        loss = tf.reduce_sum(y * tf.constant(value(r, 0)))
    close(tape.gradient(loss, x), want(0), "gradient", rtol=1e-5)


def scenario_adasum_errors():
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), dense_shape=tf.constant([3, 2]))
    raises(NotImplementedError, lambda: hvd.allreduce(slices, op=hvd.Adasum), "sparse_as_dense")
    raises(NotImplementedError, lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Adasum), "Adasum")
    raises(ValueError, lambda: hvd.allreduce(tf.ones(2, tf.int32), op=hvd.Adasum), "floating-point")
    raises(ValueError, lambda: hvd.reducescatter(tf.ones([2, 2]), op=hvd.Adasum), "allreduce only")

