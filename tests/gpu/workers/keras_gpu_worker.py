"""Keras 3 on a GPU under ringrun (tests/gpu/device_check.sh), on the backend
KERAS_BACKEND names: a small regression fit with DistributedOptimizer and
BroadcastGlobalVariablesCallback. Every rank must end with the same weights,
the loss must fall, and the model's variables must live on the GPU. On the
torch backend the gradients must have gone through ring_strategy.torch (the
engine's GPU path), not a host call. Prints "[rank] keras BACKEND ...: OK".
"""

from __future__ import annotations

import numpy as np

import keras
import keras_callbacks as hvd


def device_of(variable) -> str:
    value = variable.value
    if hasattr(value, "devices"):  # a JAX array
        return ",".join(sorted(str(d) for d in value.devices()))
    return str(value.device)


def main() -> None:
    hvd.init()
    backend = keras.backend.backend()
    keras.utils.set_random_seed(1 + hvd.rank())  # replicas start apart: the broadcast joins them
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.02)), loss="mse")
    rng = np.random.default_rng(hvd.rank())
    x = rng.standard_normal((512, 32)).astype("float32")
    y = (x[:, :4].sum(axis=1, keepdims=True) + 1).astype("float32")
    history = model.fit(x, y, batch_size=32, epochs=4, verbose=0, callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    loss = history.history["loss"]
    assert loss[-1] < 0.8 * loss[0], loss
    flat = np.concatenate([np.asarray(keras.ops.convert_to_numpy(w)).ravel() for w in model.weights])
    rows = hvd.allgather(flat[None])
    assert all(np.array_equal(rows[0], row) for row in rows), "replicas differ"
    where = device_of(model.weights[0])
    assert "cuda" in where.lower() or "gpu" in where.lower(), where
    if backend == "torch":
        from keras_callbacks import optimizer

        assert optimizer._TORCH_ALLREDUCE is not None, "the gradients went through a host call"
    print(f"[{hvd.rank()}] keras {backend} on {where}: loss {loss[0]:.3f} -> {loss[-1]:.3f}: OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
