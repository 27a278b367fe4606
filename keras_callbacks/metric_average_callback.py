"""MetricAverageCallback: epoch metrics averaged over every rank."""

from __future__ import annotations

import numpy as np

import keras

from ring_strategy import ops as ring_ops


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each numeric value of the epoch logs by its average over all
    ranks at the end of every epoch.

    Each rank computes its metrics on its own shard of the data; after this
    callback every rank reports (and ``History``, checkpoints or early
    stopping that come after it see) the same job-wide values. All values
    travel in one allreduce. Put it before callbacks that read the logs.
    It takes no arguments.

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
        history = model.fit(np.ones((8, 4)), np.ones((8, 1)), verbose=0,
                            callbacks=[hvd.MetricAverageCallback()])
    """

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if isinstance(v, (int, float, np.number)) or
                      (hasattr(v, "shape") and tuple(getattr(v, "shape", ())) == ()))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = ring_ops.allreduce(values, op=ring_ops.Average, name="MetricAverageCallback")
        for k, v in zip(keys, averaged):
            logs[k] = float(v)
