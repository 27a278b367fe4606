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
(``reference params HEX``). Settings and lines as in e2e_torch_train.py
(``TRAIN_EPOCHS``, ``TRAIN_COMMIT``, ``TRAIN_SLEEP``, ``TRAIN_FAIL`` with
``sigkill`` or ``raise``, ``TRAIN_PROGRESS``), and ``epoch begin world G
state E fit F`` (``state.epoch`` and ``fit``'s own epoch number as an epoch
begins). TAG is unused.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time

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
    from ring_strategy import basics
    from ring_strategy.exceptions import HorovodInternalError

    epochs = int(os.environ.get("TRAIN_EPOCHS", "3"))
    commit_every = int(os.environ.get("TRAIN_COMMIT", "3"))
    pause = float(os.environ.get("TRAIN_SLEEP", "0.02"))
    fail_worker, fail_step, fail_mode = (os.environ.get("TRAIN_FAIL", "") or "none:-1:none").split(":")
    progress = os.environ.get("TRAIN_PROGRESS", "")
    worker = os.environ.get("RING_ELASTIC_WORKER", os.environ.get("RING_RANK", "0"))

    hvd.init()
    x, y = data()
    # Replicas start apart: the first sync makes them rank 0's.
    model = make_model(1 + int(worker), hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM)))
    resets = []
    flags = {"first": False, "steps run": 0}

    def world() -> int:
        return basics._env().world_generation or 0  # 0: not an elastic job

    class TracedState(hvd.elastic.KerasState):
        def restore(self) -> None:
            # Called by the loop while it handles the lost peer's error; a
            # backend hands it over wrapped in its own ("UnknownError: ... PeerFailureError: ...").
            error = sys.exc_info()[1]
            wrapped = re.search(r"\b(\w+Error): ", str(error))
            name = type(error).__name__ if isinstance(error, HorovodInternalError) or not wrapped else wrapped[1]
            print(f"caught {name} at {time.time():.3f}", flush=True)
            super().restore()

        def commit(self) -> None:
            if hvd.rank() == 0:
                print(f"commit step {self.epoch * STEPS_PER_EPOCH + self.batch} epoch {self.epoch} "
                      f"at {time.time():.3f}", flush=True)
            super().commit()

    class Trace(keras.callbacks.Callback):
        """Fails where asked; prints what each step trained (after the state's callbacks)."""

        def on_epoch_begin(self, epoch, logs=None):
            print(f"epoch begin world {world()} state {state.epoch} fit {epoch}", flush=True)

        def on_train_batch_begin(self, batch, logs=None):
            step = state.epoch * STEPS_PER_EPOCH + state.batch
            if fail_worker == worker and step == int(fail_step):
                print(f"victim worker {worker} pid {os.getpid()} failing at {time.time():.3f}", flush=True)
                if fail_mode == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("the training script failed")

        def on_train_batch_end(self, batch, logs=None):
            b = state.batch - 1  # UpdateBatchStateCallback counted this batch already
            step = state.epoch * STEPS_PER_EPOCH + b
            flags["steps run"] += 1
            idx = rows(state.epoch, b, hvd.rank(), hvd.size())
            print(f"trained world {world()} epoch {state.epoch} step {step} idx {','.join(map(str, idx))}",
                  flush=True)
            if flags["first"]:
                print(f"first step world {world()} at {time.time():.3f}", flush=True)
                flags["first"] = False
            if progress and hvd.rank() == 0:
                with open(progress + ".tmp", "w") as f:
                    f.write(f"{step + 1} {hvd.size()}\n")
                os.replace(progress + ".tmp", progress)
            time.sleep(pause)

    state = TracedState(model, epoch=0, batch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=commit_every),
                 hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state), Trace()]

    def on_reset():
        resets.append(state.epoch * STEPS_PER_EPOCH + state.batch)
        flags["first"] = True

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        print(f"world {world()} worker {worker} pid {os.getpid()} rank {hvd.rank()} size {hvd.size()} "
              f"at {time.time():.3f}", flush=True)
        print(f"synced world {world()} rank {hvd.rank()} step {state.epoch * STEPS_PER_EPOCH + state.batch} "
              f"params {flat(model)}", flush=True)
        while state.epoch < epochs:
            mine = np.concatenate([rows(state.epoch, b, hvd.rank(), hvd.size())
                                   for b in range(state.batch, STEPS_PER_EPOCH)])
            model.fit(x[mine], y[mine], batch_size=GLOBAL_BATCH // hvd.size(), shuffle=False, verbose=0,
                      initial_epoch=state.epoch, epochs=state.epoch + 1, callbacks=callbacks)

    train(state)
    steps = state.epoch * STEPS_PER_EPOCH + state.batch
    print(f"resets {','.join(map(str, resets))}", flush=True)
    print(f"steps run {flags['steps run']}", flush=True)
    print(f"final epoch {state.epoch}", flush=True)
    print(f"done worker {worker} rank {hvd.rank()} steps {steps} params {flat(model)}", flush=True)
    if hvd.rank() == 0:
        print(f"reference params {reference(epochs)}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
