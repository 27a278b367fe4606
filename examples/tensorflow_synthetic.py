"""Data-parallel TensorFlow training with a GradientTape, on synthetic data.

    ringrun -np 2 python examples/tensorflow_synthetic.py

Each rank trains on its shard of the data; DistributedGradientTape averages
the gradients over all ranks inside the compiled ``tf.function`` step, and
broadcast_variables starts every rank from rank 0's weights.
"""

import argparse
import time

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="single-worker learning rate")
    args = parser.parse_args()

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 32)).astype("float32")
    y = x[:, :10].argmax(axis=1).astype("int32")
    dataset = (tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
               .repeat().batch(args.batch_size))

    tf.random.set_seed(hvd.rank())  # different on purpose: broadcast_variables makes them rank 0's
    w1 = tf.Variable(tf.random.normal([32, 64], stddev=0.1))
    b1 = tf.Variable(tf.zeros([64]))
    w2 = tf.Variable(tf.random.normal([64, 10], stddev=0.1))
    variables = [w1, b1, w2]
    hvd.broadcast_variables(variables, root_rank=0)
    lr = args.lr * hvd.size()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(xb @ w1 + b1) @ w2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
        tape = hvd.DistributedGradientTape(tape)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(lr * g)
        return loss

    start = time.time()
    for i, (xb, yb) in enumerate(dataset.take(args.steps)):
        loss = step(xb, yb)
        if i % 50 == 0:
            mean_loss = hvd.allreduce(loss).numpy()  # a collective: every rank calls it
            if hvd.rank() == 0:
                print(f"step {i}: loss {mean_loss:.4f}")
    if hvd.rank() == 0:
        print(f"{args.steps} steps in {time.time() - start:.1f} s")
    # Replicas must be identical.
    flat = tf.concat([tf.reshape(v, [-1]) for v in variables], 0)
    gathered = hvd.allgather(flat[None])
    assert bool(tf.reduce_all(gathered == gathered[0])), "replicas differ"
    hvd.shutdown()


if __name__ == "__main__":
    main()
