"""Horovod Keras training, as a Horovod user writes it: horovodrun -np 2 python horovod_keras_before.py.
(docs/migrate-horovod.md: the same script on ring is keras_after.py.)"""

import keras
import numpy as np

import horovod.tensorflow.keras as hvd

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
