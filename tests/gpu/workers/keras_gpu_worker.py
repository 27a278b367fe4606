"""Keras 3 on a GPU under ringrun (tests/gpu/device_check.sh), on the backend
KERAS_BACKEND names: a small regression fit with DistributedOptimizer and
BroadcastGlobalVariablesCallback. Every rank must end with the same weights,
the loss must fall, and the model's variables must live on the GPU. On the
torch backend the gradients must have gone through ring_strategy.torch (the
engine's GPU path), not a host call; on the JAX backend the fit is jitted
(jit_compile=True) and the gradients must have gone through the CUDA XLA
FFI handler (ring_strategy.jax_ops, XLA's stream to the engine's NCCL
path), not io_callback. Prints "[rank] keras BACKEND ...: OK".
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


def count_ffi_groups() -> list:
    """On the JAX backend: a list that gets one entry per gradient group
    the optimizer reduced through the FFI handler (jax_ops), not a host call."""
    from ring_strategy import jax_ops

    seen: list = []
    inner = jax_ops.native_group_allreduce

    def counted(*args, **kwargs):
        out = inner(*args, **kwargs)
        if out is not None:
            seen.append(len(out))
        return out

    jax_ops.native_group_allreduce = counted
    return seen


def main() -> None:
    hvd.init()
    backend = keras.backend.backend()
    ffi_groups = count_ffi_groups() if backend == "jax" else []
    keras.utils.set_random_seed(1 + hvd.rank())  # replicas start apart: the broadcast joins them
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.02)), loss="mse",
                  jit_compile=True if backend == "jax" else "auto")
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
    if backend == "jax":
        from ring_strategy import _native_ops

        assert "gpu" in _native_ops.jax_platforms(), _native_ops.describe("jax")
        assert ffi_groups, "the gradients went through a host call, not the CUDA FFI handler"
    print(f"[{hvd.rank()}] keras {backend} on {where}: loss {loss[0]:.3f} -> {loss[-1]:.3f}: OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
