"""BroadcastGlobalVariablesCallback: start every rank from the same weights."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import keras

from keras_callbacks._util import broadcast_variables, check_int, sync_jax_state
from ring_strategy.basics import size
from ring_strategy.exceptions import BadArgumentError


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from ``root_rank``
    to every other rank, once, at the start of the first ``fit``.

    Each rank usually initializes its model with its own random seed; this
    callback makes all replicas identical, as does restoring a checkpoint on
    one rank only. Variables travel in one fused broadcast per dtype.

    When training begins with every variable of the model created (a model
    with an ``Input``, or any model on the JAX and torch backends, which
    build it before the callbacks run), the broadcast happens then, before
    the first step; the optimizer is built first if it is not yet, so that
    its slot variables (momenta, iteration count) are broadcast too. A model
    whose variables are created by its first step (a ``Sequential`` without
    an ``Input`` on TensorFlow) is broadcast at the end of the first batch
    instead: that first step averages the gradients each rank computed from
    its own initial weights, then every rank takes ``root_rank``'s result.

    Args:
        root_rank: the rank whose variables everyone receives (default 0).
        device: accepted for Horovod compatibility (CPU only).
        local_variables: a variable or a list of variables that keep their
            own value on each rank (not broadcast).

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
        model.fit(np.ones((8, 4)), np.ones((8, 1)), verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """

    def __init__(self, root_rank: int = 0, device: str = "", local_variables: Any = None):
        super().__init__()
        self.root_rank = check_int("root_rank", root_rank)
        self.device = device
        self.local_variables = _variable_list(local_variables)
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        if self.root_rank >= size():
            raise ValueError(f"root_rank should be lower than size() ({size()}). Got: {self.root_rank!r}")
        if _model_built(self.model):
            optimizer = getattr(self.model, "optimizer", None)
            if optimizer is not None and not optimizer.built:
                optimizer.build(self.model.trainable_variables)
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            sync_jax_state(self.model)
            self._broadcast()

    def _broadcast(self) -> None:
        model = self.model
        variables = list(model.variables)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        local = {id(v) for v in self.local_variables}
        variables = [v for v in variables if id(v) not in local]
        broadcast_variables(variables, self.root_rank, "BroadcastGlobalVariablesCallback")
        self.broadcast_done = True


def _model_built(model: keras.Model) -> bool:
    """Whether every variable of ``model`` exists (every layer is built)."""
    if not model.built:
        return False
    return all(layer.built for layer in model._flatten_layers())


def _variable_list(local_variables: Any) -> List[Any]:
    if local_variables is None:
        return []
    if isinstance(local_variables, keras.Variable) or hasattr(local_variables, "assign"):
        return [local_variables]
    if not isinstance(local_variables, Sequence) or not all(hasattr(v, "assign") for v in local_variables):
        raise BadArgumentError(f"local_variables should be a variable or a list of variables. Got: {local_variables!r}")
    return list(local_variables)
