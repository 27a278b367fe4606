"""Process sets in ring_strategy.tensorflow and keras_callbacks on 4 ranks,
started with ``hvd.init(process_sets=[[0], [1, 2], [0, 1, 2], [1, 3]])``:
``python tf_process_sets.py SCENARIO...``. Each scenario prints
``<rank>: <scenario> ok`` (tests/workers/checks.py). Keras runs on the
backend KERAS_BACKEND names."""

from __future__ import annotations

import sys
from typing import List

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd
from tests.workers.checks import close, equal, raises, run_scenarios

SETS = [[0], [1, 2], [0, 1, 2], [1, 3]]
PS: List[hvd.ProcessSet] = []
ME = 0


def mine() -> List[hvd.ProcessSet]:
    return [ps for ps in PS if ps.included()]


def _ops(ps: hvd.ProcessSet) -> None:
    ranks, k, i = ps.ranks, ps.size(), ps.rank()
    x = tf.range(4, dtype=tf.float32) + ME
    total = sum(np.arange(4, dtype=np.float32) + r for r in ranks)
    equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total, "allreduce")
    close(hvd.allreduce(x, process_set=ps), total / k, "average")
    for got in hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=ps):
        assert got.shape == (4,)
    equal(hvd.allgather(tf.fill([ME + 1], ME), process_set=ps),
          np.concatenate([np.full(r + 1, r, np.int32) for r in ranks]), "allgather")
    equal(hvd.broadcast(tf.fill([2], ME), ranks[-1], process_set=ps), np.full(2, ranks[-1], np.int32), "broadcast")
    out, _ = hvd.alltoall(tf.range(k) + 100 * ME, splits=[1] * k, process_set=ps)
    equal(out, np.array([100 * r + i for r in ranks], np.int32), "alltoall")
    equal(hvd.reducescatter(tf.ones([k, 2]), op=hvd.Sum, process_set=ps), np.full((1, 2), float(k), np.float32), "rs")


def eager_ops() -> None:
    """Every collective on every set of this rank, eagerly."""
    for ps in mine():
        _ops(ps)
        hvd.barrier(process_set=ps)
        assert hvd.allgather_object(ME, process_set=ps) == ps.ranks
        assert hvd.broadcast_object(ME, root_rank=ps.ranks[0], process_set=ps) == ps.ranks[0]


def function_ops() -> None:
    """Collectives on a set inside tf.function (generated names counted per set)."""
    for ps in mine():
        ranks, k = ps.ranks, ps.size()

        @tf.function
        def step(x):
            return (hvd.allreduce(x, op=hvd.Sum, process_set=ps), hvd.allgather(x, process_set=ps),
                    hvd.broadcast(x, ranks[-1], process_set=ps), hvd.reducescatter(tf.ones([k, 2]), op=hvd.Sum,
                                                                                  process_set=ps))

        total, gathered, root, scattered = step(tf.fill([2], float(ME)))
        equal(total, np.full(2, float(sum(ranks)), np.float32), "allreduce in tf.function")
        equal(gathered, np.repeat(np.array(ranks, np.float32), 2), "allgather in tf.function")
        equal(root, np.full(2, float(ranks[-1]), np.float32), "broadcast in tf.function")
        equal(scattered, np.full((1, 2), float(k), np.float32), "reducescatter in tf.function")


def gradients() -> None:
    """Gradients through collectives on a set."""
    for ps in mine():
        x = tf.Variable(tf.ones(3))
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(hvd.allgather(x, process_set=ps))
        equal(tape.gradient(y, x), np.full(3, float(ps.size()), np.float32), "allgather grad")


def _batch(rank: int):
    g = np.random.default_rng(100 + rank)
    return g.standard_normal((8, 5)).astype(np.float32), g.standard_normal((8, 1)).astype(np.float32)


def gradient_tape() -> None:
    """DistributedGradientTape(process_set=[1, 2]) averages over the pair."""
    ps = PS[1]
    if not ps.included():
        return
    w = tf.Variable(tf.ones([5, 1]))
    with tf.GradientTape() as tape:
        x, y = _batch(ME)
        loss = tf.reduce_mean((x @ w - y) ** 2)
    grad, = hvd.DistributedGradientTape(tape, process_set=ps).gradient(loss, [w])
    want = []
    for r in ps.ranks:
        with tf.GradientTape() as t:
            x, y = _batch(r)
            loss = tf.reduce_mean((x @ w - y) ** 2)
        want.append(t.gradient(loss, w))
    close(grad, (want[0] + want[1]) / 2, "averaged over the pair", rtol=1e-5)


def keras_optimizer() -> None:
    """keras_callbacks.DistributedOptimizer(process_set=[0, 1, 2]): the set's
    ranks end with the same weights; rank 3 trains alone."""
    import keras

    import keras_callbacks as khvd

    ps = PS[2]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=ps), loss="mse")
    x, y = _batch(ME)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    weights = np.concatenate([w.reshape(-1) for w in model.get_weights()])
    rows = hvd.allgather(tf.constant(weights[None, :])).numpy()
    for r in ps.ranks:
        close(rows[r], rows[ps.ranks[0]], "same weights in the set", rtol=1e-6)
    assert not np.allclose(rows[3], rows[0]), "rank 3 is outside the set"


def errors() -> None:
    for ps in PS:
        if not ps.included():
            raises(hvd.BadArgumentError, lambda: hvd.allreduce(tf.ones(2), process_set=ps), "not a member")
    raises(hvd.BadArgumentError, lambda: hvd.add_process_set([0, 3]), "dynamic process sets")


SCENARIOS = {f.__name__: f for f in [eager_ops, function_ops, gradients, gradient_tape, keras_optimizer, errors]}


def main() -> None:
    global ME
    PS.extend(hvd.ProcessSet(s) for s in SETS)
    hvd.init(process_sets=PS)
    ME = hvd.rank()
    run_scenarios(SCENARIOS, sys.argv[1:], ME, after_each=hvd.barrier, stop_at_failure=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
