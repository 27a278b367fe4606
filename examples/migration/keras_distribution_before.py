"""Keras 3 data parallelism with keras.distribution, as a Keras user writes it (JAX backend, every
device of one process): KERAS_BACKEND=jax python keras_distribution_before.py.
(docs/migrate-keras.md: the same training on ring is keras_after.py.)"""

import keras
import numpy as np

keras.distribution.set_distribution(keras.distribution.DataParallel())  # each batch split over the devices
X = np.random.default_rng(1).standard_normal((64, 4)).astype("float32")
y = X @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="zeros")])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
model.fit(X, y, batch_size=64, epochs=20, shuffle=False, verbose=0)

kernel, bias = model.get_weights()
print("weights", " ".join(f"{w:.5f}" for w in kernel.flatten()), f"{bias[0]:.5f}")
