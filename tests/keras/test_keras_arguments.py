"""Horovod's Keras optimizer arguments that ring accepts (in a world of
one): ``sparse_as_dense``, ``device_dense`` and ``device_sparse`` on
``DistributedOptimizer`` and ``PartialDistributedOptimizer``, checked, and a
model with an Embedding (sparse gradients on TensorFlow) training either way."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
import keras_callbacks as hvd  # noqa: E402
from ring_strategy.exceptions import BadArgumentError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def world():
    hvd.init()
    yield
    hvd.shutdown()


def _model():
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    return model


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_partial_optimizer_takes_sparse_as_dense(sparse_as_dense):
    model = _model()
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[model.layers[-1]],
                                          sparse_as_dense=sparse_as_dense, device_dense="", device_sparse="")
    model.compile(optimizer=opt, loss="mse")
    x = np.random.default_rng(0).integers(0, 10, (8, 3)).astype("int32")
    history = model.fit(x, np.ones((8, 1)), epochs=2, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("make", [hvd.DistributedOptimizer, hvd.PartialDistributedOptimizer])
def test_bad_values_are_quoted(make):
    with pytest.raises(BadArgumentError, match="sparse_as_dense should be a bool. Got: 'yes'"):
        make(keras.optimizers.SGD(0.1), sparse_as_dense="yes")
    with pytest.raises(BadArgumentError, match="device_dense should be a string. Got: 0"):
        make(keras.optimizers.SGD(0.1), device_dense=0)
