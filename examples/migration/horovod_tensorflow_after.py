"""Horovod TensorFlow training on ring: ringrun -np 2 python horovod_tensorflow_after.py.
(docs/migrate-horovod.md: the Horovod script it came from is horovod_tensorflow_before.py.)"""

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd

hvd.init()
X = np.random.default_rng(1).standard_normal((64, 4)).astype("float32")
y = X @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
mine = slice(hvd.rank(), None, hvd.size())  # this worker's shard of the data

w, b = tf.Variable(tf.zeros((4, 1))), tf.Variable(tf.zeros((1,)))
hvd.broadcast_variables([w, b], root_rank=0)

for step in range(20):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((X[mine] @ w + b - y[mine]) ** 2)
    tape = hvd.DistributedGradientTape(tape)
    grad_w, grad_b = tape.gradient(loss, [w, b])
    w.assign_sub(0.1 * grad_w)
    b.assign_sub(0.1 * grad_b)

if hvd.rank() == 0:
    print("weights", " ".join(f"{v:.5f}" for v in w.numpy().flatten()), f"{b.numpy()[0]:.5f}")
