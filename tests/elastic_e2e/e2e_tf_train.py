"""An elastic TensorFlow 2 script written as users write one, for the elastic
end-to-end tests: ``python e2e_tf_train.py [TAG]`` under elastic ringrun.

``hvd.elastic.run`` drives the loop; the state is
``hvd.elastic.TensorFlowState(weights + momenta, step=0)``. The model takes
a sample's features and its token: ``tanh(x @ w1 + gather(emb, token) +
b1) @ w2 + b2``, so the gradient of ``emb`` is an ``IndexedSlices``. ONE
``tf.function`` step (input signature: any number of rows, so it is traced
once, in the first world, and the same graph runs in every later world)
computes the gradients with ``hvd.DistributedGradientTape(tape,
gradient_predivide_factor=2.0)`` (Average) and applies SGD with momentum.
Step ``s`` trains on the global batch ``s`` (a slice of the epoch's order)
split ``rank::size``, ``GLOBAL_BATCH // size()`` rows a rank, so any run
equals one process training on the global batches, which the worker that
ends as rank 0 computes at the end (``reference params HEX``, from worker
0's initial variables). ``state.commit()`` every ``TRAIN_COMMIT`` steps.
TAG is unused.

Settings and lines: e2e_worker.py's (params: the weights and the
momenta), and ``traced N`` at the end (how many times this process traced
the step).
"""

from __future__ import annotations

import sys

import numpy as np

SAMPLES, DIM, TOKENS, HIDDEN, GLOBAL_BATCH, SEED = 120, 8, 10, 16, 6, 7
LR, MOMENTUM, PREDIVIDE = 0.05, 0.9, 2.0
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH
SHAPES = {"emb": (TOKENS, HIDDEN), "w1": (DIM, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, 1), "b2": (1,)}


def data():
    """Features, token, target."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, DIM)).astype(np.float32)
    token = rng.integers(0, TOKENS, SAMPLES).astype(np.int32)
    y = np.tanh(x @ rng.standard_normal((DIM, 1)) + rng.standard_normal((TOKENS, 1))[token]).astype(np.float32)
    return x, token, y


def order(epoch: int) -> np.ndarray:
    """The epoch's order of samples: global batch ``b`` is its slice ``b``."""
    return np.random.default_rng(SEED + epoch).permutation(SAMPLES)


def rows(step: int, rank: int, size: int) -> np.ndarray:
    """This rank's rows of the global batch of ``step``."""
    epoch, batch = divmod(step, STEPS_PER_EPOCH)
    return order(epoch)[batch * GLOBAL_BATCH:(batch + 1) * GLOBAL_BATCH][rank::size]


def make_variables(seed: int):
    """The weights (by name) and their momenta."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    weights = {k: tf.Variable(rng.standard_normal(s).astype(np.float32) * 0.3, name=k) for k, s in SHAPES.items()}
    return weights, [tf.Variable(tf.zeros(s)) for s in SHAPES.values()]


def make_step(weights, momenta, tape=lambda t: t):
    """The training step, a ``tf.function`` over any number of rows:
    gradients through ``tape(tf.GradientTape)``, then SGD with momentum.
    ``step.traces`` counts its tracings."""
    import tensorflow as tf

    variables = list(weights.values())
    rows_of = [tf.TensorSpec([None, DIM], tf.float32), tf.TensorSpec([None], tf.int32),
               tf.TensorSpec([None, 1], tf.float32)]

    @tf.function(input_signature=rows_of)
    def step(x, token, y):
        step.traces += 1
        with tf.GradientTape() as g:
            hidden = tf.tanh(x @ weights["w1"] + tf.gather(weights["emb"], token) + weights["b1"])
            loss = tf.reduce_mean((hidden @ weights["w2"] + weights["b2"] - y) ** 2)
        grads = tape(g).gradient(loss, variables)
        assert isinstance(grads[0], tf.IndexedSlices), type(grads[0])
        for v, m, grad in zip(variables, momenta, grads):
            m.assign(MOMENTUM * m + tf.convert_to_tensor(grad))
            v.assign_sub(LR * m)

    step.traces = 0
    return step


def flat(variables) -> str:
    return np.concatenate([v.numpy().reshape(-1) for v in variables]).tobytes().hex()


def reference(epochs: int) -> str:
    """One process on the global batches, from worker 0's initial variables."""
    x, token, y = data()
    weights, momenta = make_variables(1)
    step = make_step(weights, momenta)
    for s in range(epochs * STEPS_PER_EPOCH):
        idx = rows(s, 0, 1)
        step(x[idx], token[idx], y[idx])
    return flat([*weights.values(), *momenta])


def main() -> None:
    import tensorflow as tf

    import ring_strategy.tensorflow as hvd
    from tests.elastic_e2e.e2e_worker import Trace

    trace = Trace(hvd)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    x, token, y = data()
    # Replicas start apart: the first sync makes them rank 0's.
    weights, momenta = make_variables(1 + int(trace.worker))
    variables = [*weights.values(), *momenta]
    step = make_step(weights, momenta, lambda tape: hvd.DistributedGradientTape(
        tape, op=hvd.Average, gradient_predivide_factor=PREDIVIDE))

    class TracedState(hvd.elastic.TensorFlowState):
        def restore(self) -> None:
            # Called by the loop while it handles the lost peer's error (TensorFlow's wrapping of it).
            trace.caught(sys.exc_info()[1])
            super().restore()

    @hvd.elastic.run
    def train(state):
        trace.entered(state.step, flat(variables))
        while state.step < trace.epochs * STEPS_PER_EPOCH:
            trace.fail_here(state.step)
            idx = rows(state.step, hvd.rank(), hvd.size())
            step(x[idx], token[idx], y[idx])
            trace.trained(state.step // STEPS_PER_EPOCH, state.step, idx)
            state.step += 1
            if state.step % trace.commit_every == 0:
                trace.commit(state.step, (state.step - 1) // STEPS_PER_EPOCH)
                state.commit()

    state = TracedState(variables, step=0)
    state.register_reset_callbacks([lambda: trace.reset(state.step)])
    train(state)
    print(f"traced {step.traces}", flush=True)
    trace.finished(state.step, flat(variables))
    if hvd.rank() == 0:
        print(f"reference params {reference(trace.epochs)}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
