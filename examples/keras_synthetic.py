"""Data-parallel Keras 3 training on synthetic data, on any Keras backend.

    KERAS_BACKEND=jax ringrun -np 2 python examples/keras_synthetic.py
    KERAS_BACKEND=torch ringrun -np 2 python examples/keras_synthetic.py --epochs 3
    KERAS_BACKEND=tensorflow ringrun -np 2 python examples/keras_synthetic.py --compare-plain

Each rank trains on its shard of the data with a per-rank batch; the
gradients are averaged over all ranks every step. ``--compare-plain`` also
times the same training with the plain (unwrapped) optimizer and prints the
per-step overhead of DistributedOptimizer.
"""

import argparse
import time

import numpy as np

import keras
import ring_strategy.keras as hvd


def build_model(features: int) -> keras.Model:
    return keras.Sequential([
        keras.Input((features,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


class StepTimer(keras.callbacks.Callback):
    """Seconds per step, from the second epoch on (the first one compiles)."""

    def __init__(self):
        super().__init__()
        self.times, self._t = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._t)


def train(x, y, args, distributed: bool) -> float:
    model = build_model(x.shape[1])
    lr = args.lr * hvd.size()
    opt = keras.optimizers.SGD(lr, momentum=0.9)
    callbacks = []
    if distributed:
        opt = hvd.DistributedOptimizer(opt)
        callbacks = [hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback(),
                     hvd.LearningRateWarmupCallback(lr, warmup_epochs=1, verbose=args.verbose)]
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    timer = StepTimer()
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=False,
                        verbose=args.verbose if hvd.rank() == 0 else 0, callbacks=callbacks + [timer])
    if distributed and hvd.rank() == 0:
        print(f"final loss {history.history['loss'][-1]:.4f} accuracy {history.history['accuracy'][-1]:.3f}")
    steps = len(timer.times) // args.epochs
    return float(np.median(timer.times[steps:])) if args.epochs > 1 else float(np.median(timer.times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.01, help="single-worker learning rate")
    parser.add_argument("--verbose", type=int, default=0)
    parser.add_argument("--compare-plain", action="store_true")
    args = parser.parse_args()

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.samples, 32)).astype("float32")
    y = (x[:, :10].argmax(axis=1)).astype("int32")
    keras.utils.set_random_seed(hvd.rank())  # different on purpose: the callback broadcasts rank 0's
    xs, ys = hvd.shard((x, y))

    wrapped = train(xs, ys, args, distributed=True)
    if args.compare_plain:
        plain = train(xs, ys, args, distributed=False)
        if hvd.rank() == 0:
            print(f"backend {keras.backend.backend()} size {hvd.size()}: plain {plain * 1e3:.2f} ms/step, "
                  f"DistributedOptimizer {wrapped * 1e3:.2f} ms/step, overhead {(wrapped - plain) * 1e3:.2f} ms/step")
    hvd.shutdown()


if __name__ == "__main__":
    main()
