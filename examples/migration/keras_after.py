"""Keras training on ring: ringrun -np 2 python keras_after.py (any Keras backend). docs/migrate-horovod.md
and docs/migrate-keras.md: it came from horovod_keras_before.py or keras_distribution_before.py."""

import keras
import numpy as np

import ring_strategy.keras as hvd

hvd.init()
X = np.random.default_rng(1).standard_normal((64, 4)).astype("float32")
y = X @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
mine = slice(hvd.rank(), None, hvd.size())  # this worker's shard of the data

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="zeros")])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
model.fit(X[mine], y[mine], batch_size=64, epochs=20, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

if hvd.rank() == 0:
    kernel, bias = model.get_weights()
    print("weights", " ".join(f"{w:.5f}" for w in kernel.flatten()), f"{bias[0]:.5f}")
