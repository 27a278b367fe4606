"""BroadcastGlobalVariablesCallback: start every rank from the same weights."""

from __future__ import annotations

import keras

from keras_callbacks._util import broadcast_variables, check_int
from ring_strategy.basics import size


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from ``root_rank``
    to every other rank when training begins.

    Each rank usually initializes its model with its own random seed; this
    callback makes all replicas identical before the first step, as does
    restoring a checkpoint on one rank only. The optimizer is built first if
    it is not yet, so that its slot variables (momenta, iteration count) are
    broadcast too. Variables travel in one fused broadcast per dtype. It runs
    once, at the start of the first ``fit``.

    Args:
        root_rank: the rank whose variables everyone receives (default 0).

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
        model.fit(np.ones((8, 4)), np.ones((8, 1)), verbose=0,
                  callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    """

    def __init__(self, root_rank: int = 0):
        super().__init__()
        self.root_rank = check_int("root_rank", root_rank)
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        if self.root_rank >= size():
            raise ValueError(f"root_rank should be lower than size() ({size()}). Got: {self.root_rank!r}")
        model = self.model
        variables = list(model.variables)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            if not optimizer.built:
                optimizer.build(model.trainable_variables)
            variables += list(optimizer.variables)
        broadcast_variables(variables, self.root_rank, "BroadcastGlobalVariablesCallback")
        self.broadcast_done = True
