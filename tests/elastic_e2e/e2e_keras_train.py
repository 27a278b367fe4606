"""An elastic Keras 3 script written as users write one, for the elastic
end-to-end tests: ``python e2e_keras_train.py [TAG]`` under elastic ringrun
(any ``KERAS_BACKEND``).

``keras_callbacks.elastic``: ``KerasState(model, epoch=0, batch=0)``,
``CommitStateCallback(state, TRAIN_COMMIT)``, ``UpdateBatchStateCallback``,
``UpdateEpochStateCallback`` and ``run``; ``model.fit`` one epoch at a time
from ``state.batch``, ``GLOBAL_BATCH // size()`` rows a step: step ``s``
trains on the global batch ``s`` (a slice of the epoch's order) split
``rank::size``, so any run equals one process training on the global
batches, which the worker that ends as rank 0 computes at the end
(``reference params HEX``). Settings and lines: e2e_worker.py's, and
``epoch begin world G state E fit F`` (``state.epoch`` and ``fit``'s own epoch number as an epoch
begins). TAG is unused.
"""

from __future__ import annotations

import sys

import numpy as np

SAMPLES, DIM, GLOBAL_BATCH, SEED = 120, 8, 6, 7
LR, MOMENTUM = 0.05, 0.9
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, DIM)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((DIM, 1))).astype(np.float32)
    return x, y


def order(epoch: int) -> np.ndarray:
    """The epoch's order of samples: global batch ``b`` is its slice ``b``."""
    return np.random.default_rng(SEED + epoch).permutation(SAMPLES)


def rows(epoch: int, batch: int, rank: int, size: int) -> np.ndarray:
    """This rank's rows of global batch ``batch`` of ``epoch``."""
    return order(epoch)[batch * GLOBAL_BATCH:(batch + 1) * GLOBAL_BATCH][rank::size]


def make_model(seed: int, optimizer):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def flat(model) -> str:
    return np.concatenate([np.asarray(w, np.float32).reshape(-1) for w in model.get_weights()]).tobytes().hex()


def reference(epochs: int) -> str:
    """One process on the global batches, from worker 0's initial weights."""
    import keras

    x, y = data()
    model = make_model(1, keras.optimizers.SGD(LR, momentum=MOMENTUM))
    for epoch in range(epochs):
        rows_ = order(epoch)
        model.fit(x[rows_], y[rows_], batch_size=GLOBAL_BATCH, shuffle=False, verbose=0)
    return flat(model)


def main() -> None:
    import keras

    import keras_callbacks as hvd
    from tests.elastic_e2e.e2e_worker import Trace

    trace = Trace(hvd)
    hvd.init()
    x, y = data()
    # Replicas start apart: the first sync makes them rank 0's.
    model = make_model(1 + int(trace.worker), hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM)))

    class TracedState(hvd.elastic.KerasState):
        def restore(self) -> None:
            # Called by the loop while it handles the lost peer's error.
            trace.caught(sys.exc_info()[1])
            super().restore()

        def commit(self) -> None:
            trace.commit(self.epoch * STEPS_PER_EPOCH + self.batch, self.epoch)
            super().commit()

    class StepTrace(keras.callbacks.Callback):
        """Fails where asked; prints what each step trained (after the state's callbacks)."""

        def on_epoch_begin(self, epoch, logs=None):
            print(f"epoch begin world {trace.world()} state {state.epoch} fit {epoch}", flush=True)

        def on_train_batch_begin(self, batch, logs=None):
            trace.fail_here(state.epoch * STEPS_PER_EPOCH + state.batch)

        def on_train_batch_end(self, batch, logs=None):
            b = state.batch - 1  # UpdateBatchStateCallback counted this batch already
            trace.trained(state.epoch, state.epoch * STEPS_PER_EPOCH + b, rows(state.epoch, b, hvd.rank(), hvd.size()))

    state = TracedState(model, epoch=0, batch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=trace.commit_every),
                 hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state), StepTrace()]
    state.register_reset_callbacks([lambda: trace.reset(state.epoch * STEPS_PER_EPOCH + state.batch)])

    @hvd.elastic.run
    def train(state):
        trace.entered(state.epoch * STEPS_PER_EPOCH + state.batch, flat(model))
        while state.epoch < trace.epochs:
            mine = np.concatenate([rows(state.epoch, b, hvd.rank(), hvd.size())
                                   for b in range(state.batch, STEPS_PER_EPOCH)])
            model.fit(x[mine], y[mine], batch_size=GLOBAL_BATCH // hvd.size(), shuffle=False, verbose=0,
                      initial_epoch=state.epoch, epochs=state.epoch + 1, callbacks=callbacks)

    train(state)
    print(f"final epoch {state.epoch}", flush=True)
    trace.finished(state.epoch * STEPS_PER_EPOCH + state.batch, flat(model))
    if hvd.rank() == 0:
        print(f"reference params {reference(trace.epochs)}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
