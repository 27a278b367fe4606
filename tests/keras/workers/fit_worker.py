"""Keras data-parallel training checks, run under ringrun -np 2 with the
backend chosen by KERAS_BACKEND. Prints "<rank>: <check> ok" for each check.
Rank 0 also trains the single-process reference on the global batch and
compares. OUT_DIR holds the saved model.

Usage: fit_worker.py OUT_DIR
"""

import faulthandler
import os
import sys
import time

import numpy as np

import keras
import keras_callbacks as hvd
import ring_strategy
from ring_strategy.timeline import load as load_timeline
from tests.workers.checks import identical_rows, raises

GLOBAL_BATCH = 8
EPOCHS = 4
WARMUP = 2
LR = 0.05
SAMPLES = 64


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((5,)),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(1),
    ])


def data():
    rng = np.random.default_rng(123)
    x = rng.standard_normal((SAMPLES, 5)).astype("float32")
    y = (x @ rng.standard_normal((5, 1)) + 0.1).astype("float32")
    return x, y


class LrRecorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.lrs = []

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def log(msg):
    print(f"{hvd.rank()}: {msg}", flush=True)


def check_callbacks_namespace():
    """hvd.callbacks.X is the callback hvd.X, as in horovod.keras."""
    import keras_callbacks.callbacks as namespace

    assert hvd.callbacks is namespace
    for name in namespace.__all__:
        assert getattr(hvd.callbacks, name) is getattr(hvd, name), name
    log("callbacks_namespace ok")


def linear_sgd_reference(kernels, x, y, n, steps):
    """Dense(1) with MSE and plain SGD on rank-sharded data (rank::n), in
    float64: step 1 averages the gradients each rank computes from its own
    kernel ``kernels[rank]``; from then on every rank holds ``kernels[0]``'s
    result. Returns the final kernel and bias."""
    w, b = [k.astype(np.float64) for k in kernels], np.zeros(1)
    batch = GLOBAL_BATCH // n
    for step in range(steps):
        gw, gb = 0.0, 0.0
        for r in range(n):
            xr, yr = x[r::n][step * batch:(step + 1) * batch], y[r::n][step * batch:(step + 1) * batch]
            err = xr @ w[r if step == 0 else 0] + b - yr
            gw, gb = gw + 2 * xr.T @ err / batch / n, gb + 2 * err.sum(0) / batch / n
        w, b = [w[0] - LR * gw], b - LR * gb
    return w[0], b


def check_unbuilt(x, y, xs, ys):
    """A model without an Input has no variables when TensorFlow's fit starts
    (the first step creates them): the broadcast comes after the first batch.
    On JAX and torch fit builds the model first: it comes before."""
    r, n = hvd.rank(), hvd.size()
    kernels = [np.linspace(-1, 1, 5, dtype="float32").reshape(5, 1) * (k + 1) for k in range(n)]
    model = keras.Sequential([keras.layers.Dense(
        1, kernel_initializer=lambda shape, dtype=None: keras.ops.convert_to_tensor(kernels[r], dtype=dtype))])
    assert not model.built
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse")
    steps = SAMPLES // GLOBAL_BATCH
    model.fit(xs, ys, batch_size=GLOBAL_BATCH // n, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()])
    got = [np.asarray(w) for w in model.get_weights()]
    identical_rows(hvd.allgather(np.concatenate([w.ravel() for w in got])[None]), "replicas")
    deferred = keras.backend.backend() == "tensorflow"
    want = linear_sgd_reference(kernels if deferred else [kernels[0]] * n, x, y, n, steps)
    diff = max(np.abs(a - b).max() for a, b in zip(got, want))
    assert diff < 1e-5, (diff, got, want)
    log(f"unbuilt ok (max weight diff {diff:.2g})")


def main(out_dir):
    # A hang prints every thread's stack (the test sets HANG_DUMP).
    faulthandler.dump_traceback_later(int(os.environ.get("HANG_DUMP", "100000")), exit=True)
    t0 = time.time()
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # Ranks start from different weights; BroadcastGlobalVariablesCallback
    # must make them rank 0's (seed 1, the reference's seed).
    model = make_model(seed=1 + r)
    if r == 0:
        keras.optimizers.SGD()  # Keras' per-process optimizer names now differ between ranks
    base = keras.optimizers.SGD(LR, momentum=0.9)
    opt = hvd.DistributedOptimizer(base)
    assert isinstance(opt, keras.optimizers.SGD), type(opt).__mro__
    clone = type(opt).from_config(opt.get_config())
    assert type(clone) is type(opt) and clone.get_config() == opt.get_config()
    assert opt.get_config() == base.get_config()
    log("config ok")
    if keras.backend.backend() in ("tensorflow", "jax"):
        from ring_strategy import _native_ops

        log(f"collectives {_native_ops.describe(keras.backend.backend())}")
    model.compile(optimizer=opt, loss="mse", jit_compile=False)

    x, y = data()
    xs, ys = hvd.shard((x, y))
    assert len(xs) == SAMPLES // n and np.array_equal(xs[0], x[r])
    recorder = LrRecorder()
    callbacks = [hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback(),
                 hvd.LearningRateWarmupCallback(LR, warmup_epochs=WARMUP, verbose=1),
                 hvd.LearningRateScheduleCallback(LR, 0.5, start_epoch=WARMUP + 1), recorder]
    t_fit = time.time()
    history = model.fit(xs, ys, batch_size=GLOBAL_BATCH // n, epochs=EPOCHS, shuffle=False, verbose=0,
                        callbacks=callbacks)
    fit_s = time.time() - t_fit
    weights = [np.asarray(w) for w in model.get_weights()]
    flat = np.concatenate([w.ravel() for w in weights])
    identical_rows(hvd.allgather(flat[None]), "replicas")
    log(f"fit ok ({fit_s:.1f} s)")

    # Warmup from LR / size to LR over WARMUP epochs, per batch; then halved.
    steps = SAMPLES // GLOBAL_BATCH
    expected = [LR / n * ((e + b / steps) * (n - 1) / WARMUP + 1) if e < WARMUP else LR * (0.5 if e > WARMUP else 1)
                for e in range(EPOCHS) for b in range(steps)]
    np.testing.assert_allclose(recorder.lrs, expected, rtol=1e-6)
    losses = np.array(history.history["loss"])
    identical_rows(hvd.allgather(losses[None]), "losses")
    log("schedule ok")

    # The single-process reference on the global batch: plain optimizer, rank
    # 0's initial weights, the same learning rates as explicit schedules.
    if r == 0:
        ref = make_model(seed=1)
        ref.compile(optimizer=keras.optimizers.SGD(LR, momentum=0.9), loss="mse", jit_compile=False)
        ref_schedule = [
            hvd.LearningRateScheduleCallback(LR, lambda e: 1 / n * (e * (n - 1) / WARMUP + 1), end_epoch=WARMUP,
                                             staircase=False),
            # The warmup sets LR itself at its end, without momentum correction.
            hvd.LearningRateScheduleCallback(LR, 1.0, start_epoch=WARMUP, end_epoch=WARMUP + 1,
                                             momentum_correction=False),
            hvd.LearningRateScheduleCallback(LR, 0.5, start_epoch=WARMUP + 1),
        ]
        ref_history = ref.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                              callbacks=ref_schedule)
        diff = max(np.abs(a - np.asarray(b)).max() for a, b in zip(weights, ref.get_weights()))
        loss_diff = np.abs(losses - np.array(ref_history.history["loss"])).max()
        assert diff < 1e-5 and loss_diff < 1e-5, (diff, loss_diff)
        log(f"reference ok (max weight diff {diff:.2g}, max loss diff {loss_diff:.2g})")

    # Save and load: the optimizer comes back wrapped, with its state.
    path = os.path.join(out_dir, "model.keras")
    if r == 0:
        model.save(path)
    hvd.barrier()
    loaded = hvd.load_model(path)
    lopt = loaded.optimizer
    assert isinstance(lopt, keras.optimizers.SGD) and type(lopt).__mro__[1].__name__ == "_DistributedMixin", \
        type(lopt).__mro__
    for a, b in zip(lopt.variables, model.optimizer.variables):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-6)
    plain = keras.models.load_model(path)
    assert isinstance(plain.optimizer, keras.optimizers.SGD), type(plain.optimizer)
    assert "_DistributedMixin" not in str(type(plain.optimizer).__mro__), type(plain.optimizer).__mro__
    loaded.fit(xs, ys, batch_size=GLOBAL_BATCH // n, epochs=1, shuffle=False, verbose=0)
    flat = np.concatenate([np.asarray(w).ravel() for w in loaded.get_weights()])
    identical_rows(hvd.allgather(flat[None]), "replicas")
    log("save_load ok")

    # Compression: bf16 on the wire still keeps replicas identical.
    model2 = make_model(seed=7)
    model2.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), compression=hvd.Compression.bf16,
                                                      backward_passes_per_step=2, average_aggregated_gradients=True),
                   loss="mse")
    model2.fit(xs, ys, batch_size=4, epochs=1, shuffle=False, verbose=0,
               callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    flat = np.concatenate([np.asarray(w).ravel() for w in model2.get_weights()])
    identical_rows(hvd.allgather(flat[None]), "replicas")
    log("compression ok")

    # backward_passes_per_step=2 equals one process accumulating the global
    # batch's gradients over 2 batches; on TensorFlow and torch the ranks
    # communicate once per update (counted in the timeline), on JAX per batch.
    trace = os.path.join(out_dir, "accumulation.json")
    model6 = make_model(seed=13)
    model6.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR), backward_passes_per_step=2,
                                                      average_aggregated_gradients=True, name="accumulation"),
                   loss="mse", jit_compile=False)
    ring_strategy.start_timeline(trace)
    model6.fit(xs, ys, batch_size=GLOBAL_BATCH // n, epochs=1, shuffle=False, verbose=0)
    ring_strategy.stop_timeline()
    if r == 0:
        ref6 = make_model(seed=13)
        ref6.compile(optimizer=keras.optimizers.SGD(LR, gradient_accumulation_steps=2), loss="mse", jit_compile=False)
        ref6.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        diff = max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(model6.get_weights(), ref6.get_weights()))
        assert diff < 1e-5, diff
        events = load_timeline(trace)
        rows = {e["pid"] for e in events if e.get("name") == "process_name"
                and e["args"]["name"].startswith("keras.DistributedOptimizer.accumulation.")}
        reductions = sum(1 for e in events if e.get("pid") in rows and e.get("ph") == "B" and e.get("name") == "ALLREDUCE")
        batches = SAMPLES // GLOBAL_BATCH
        expected = batches if keras.backend.backend() == "jax" else batches // 2
        # one timeline row per engine tensor: a gradient each through the
        # native ops, one flattened buffer per dtype through host calls
        assert reductions == expected * len(rows), (reductions, expected, len(rows))
    log("accumulation ok")

    # Sharding a PyDataset and a tf.data.Dataset; run_eagerly=True trains too.
    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4]

    py_shard = hvd.shard(Batches())
    assert len(py_shard) == 5 // n
    assert np.array_equal(py_shard[1][0], x[(n + r) * 4:(n + r + 1) * 4])
    import tensorflow as tf

    ds_shard = list(hvd.shard(tf.data.Dataset.range(7)).as_numpy_iterator())
    assert ds_shard == list(range(r, 7, n)), ds_shard
    model4 = make_model(seed=11 + r)
    model4.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse", run_eagerly=True)
    model4.fit(py_shard, epochs=1, verbose=0, callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    flat = np.concatenate([np.asarray(w).ravel() for w in model4.get_weights()])
    identical_rows(hvd.allgather(flat[None]), "replicas")
    log("sharding ok")

    check_callbacks_namespace()
    check_unbuilt(x, y, xs, ys)

    # Validation quotes the bad value.
    for call, text in [
        (lambda: hvd.LearningRateWarmupCallback("abc"), "should be a float. Got: 'abc'"),
        (lambda: hvd.LearningRateScheduleCallback(0.1, "x"), "should be a float. Got: 'x'"),
        (lambda: hvd.LearningRateWarmupCallback(0.1, warmup_epochs=0), "Got: 0"),
        (lambda: hvd.BroadcastGlobalVariablesCallback(-1), "Got: -1"),
        (lambda: hvd.BroadcastGlobalVariablesCallback(0, local_variables="v"), "Got: 'v'"),
        (lambda: hvd.DistributedOptimizer("sgd"), "Got: 'sgd'"),
        (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0), "Got: 0"),
        (lambda: hvd.shard("abc"), "Got: 'str'"),
    ]:
        raises(ValueError, call, text)
    log("validation ok")

    if keras.backend.backend() == "tensorflow" and n > 1:
        if os.environ.get("RING_NATIVE_OPS") == "0":  # host calls cannot enter XLA-compiled code
            model3 = make_model(seed=3)
            model3.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                           jit_compile=True)
            raises(Exception, lambda: model3.fit(xs, ys, batch_size=4, epochs=1, verbose=0), "jit_compile=False")
            log("jit_compile ok")
        else:
            # XLA-compiled steps reduce through ring's custom call and train
            # what the uncompiled steps train.
            trained = []
            for jit in (True, False):
                m = make_model(seed=3)
                m.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                          jit_compile=jit)
                m.fit(xs, ys, batch_size=4, epochs=1, shuffle=False, verbose=0)
                trained.append(np.concatenate([np.asarray(w).ravel() for w in m.get_weights()]))
            identical_rows(hvd.allgather(trained[0][None]), "jit_compile replicas")
            np.testing.assert_allclose(trained[0], trained[1], rtol=1e-5, atol=1e-6)
            log("jit_compile ok")
    if keras.backend.backend() == "torch" and n > 1:
        # jit_compile=True is torch.compile there: the reduction is a graph break.
        t = time.time()
        model5 = make_model(seed=5 + r)
        model5.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse", jit_compile=True)
        model5.fit(xs[:16], ys[:16], batch_size=4, epochs=1, verbose=0,
                   callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
        flat = np.concatenate([np.asarray(w).ravel() for w in model5.get_weights()])
        identical_rows(hvd.allgather(flat[None]), "replicas")
        # The gradients went to ring_strategy.torch as torch tensors, not through a host call.
        from keras_callbacks import optimizer as keras_optimizer

        assert keras_optimizer._TORCH_ALLREDUCE is not None
        log(f"torch_compile ok ({time.time() - t:.1f} s)")
    log(f"total {time.time() - t0:.1f} s")
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
