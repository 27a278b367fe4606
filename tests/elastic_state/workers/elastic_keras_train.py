"""Small elastic Keras 3 and TensorFlow training scripts, and the same
scripts without elastic, for tests/elastic_state/test_elastic_keras_tf.py.

``--mode tf,keras`` (the default) runs both scripts, one after the other,
in the same processes.

``--mode keras`` (any ``KERAS_BACKEND``): ``model.fit`` one epoch at a time
on this rank's shard (rows rank::size), ``--batch`` rows a step, resuming an
epoch at ``state.batch``; the elastic version keeps a ``KerasState`` with
``CommitStateCallback(state, --commit-every)``, ``UpdateBatchStateCallback``
and ``UpdateEpochStateCallback``. ``--relative-epochs`` numbers each fit's
epochs from 0 (``epochs=1``) instead of ``initial_epoch=state.epoch``.

``--mode tf``: a TensorFlow 2 loop over ``tf.Variable``\\ s (an MLP and its
momentum buffers) with a ``tf.function`` step averaging gradients with
``hvd.allreduce``; the elastic version keeps a ``TensorFlowState`` and
commits every ``--commit-every`` steps.

The test drives the elastic loop's exits:

- ``--host-update EPOCH:BATCH`` (keras): rank 0 only replaces
  ``ring_strategy.elastic._world.host_updates`` so that the commit at that
  point reports new hosts (``skip_sync`` True), once.
- ``--fail STEP`` (tf): every rank's step STEP (its first try) raises
  ``HorovodInternalError`` inside the ``tf.function`` (TensorFlow wraps it).

Printed by every rank, for each MODE it ran: ``<rank>: MODE weights
<sha256>``, ``<rank>: MODE resets <...>``, and ``<rank>: keras epoch N``
(``state.epoch`` after training), ``<rank>: tf steps run N``; at the end
``<rank>: done``.
"""

import argparse
import hashlib

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="tf,keras", help="tf, keras or both (one after the other)")
parser.add_argument("--elastic", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=64)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--commit-every", type=int, default=3)
parser.add_argument("--host-update", default="")
parser.add_argument("--fail", type=int, default=-1)
parser.add_argument("--relative-epochs", action="store_true")
args = parser.parse_args()

rng = np.random.default_rng(0)
X = rng.standard_normal((args.samples, 8)).astype(np.float32)
Y = np.tanh(X @ rng.standard_normal((8, 1))).astype(np.float32)
resets = {"tf": [], "keras": []}
done = set()


def digest(arrays):
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def keras_main():
    import keras

    import keras_callbacks as hvd
    from ring_strategy.elastic import _world

    hvd.init()
    me = hvd.rank()
    x, y = X[me::hvd.size()], Y[me::hvd.size()]
    keras.utils.set_random_seed(1 + me)  # replicas start apart; the first sync makes them rank 0's
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss="mse")

    def fit(epoch, batch, callbacks):
        first, last = (0, 1) if args.relative_epochs else (epoch, epoch + 1)
        model.fit(x[batch * args.batch:], y[batch * args.batch:], batch_size=args.batch, shuffle=False, verbose=0,
                  initial_epoch=first, epochs=last, callbacks=callbacks)

    if not args.elastic:
        broadcast = hvd.BroadcastGlobalVariablesCallback(0)
        for epoch in range(args.epochs):
            fit(epoch, 0, [broadcast])
        print(f"{me}: keras weights {digest(model.get_weights())}", flush=True)
        return me

    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: resets["keras"].append(f"{state.epoch}.{state.batch}")])
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=args.commit_every),
                 hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state)]
    if args.host_update and me == 0:
        real, at = _world.host_updates, args.host_update

        def host_updates():
            if f"{state.epoch}:{state.batch}" == at and "host-update" not in done:
                done.add("host-update")
                return True, True
            return real()

        _world.host_updates = host_updates

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            fit(state.epoch, state.batch, callbacks)

    train(state)
    print(f"{me}: keras epoch {state.epoch}", flush=True)
    print(f"{me}: keras weights {digest(model.get_weights())}", flush=True)
    return me


def tf_main():
    import tensorflow as tf

    import ring_strategy.tensorflow as hvd

    hvd.init()
    me = hvd.rank()
    x, y = X[me::hvd.size()], Y[me::hvd.size()]
    init = np.random.default_rng(1 + me)
    shapes = [(8, 16), (16,), (16, 1), (1,)]
    weights = [tf.Variable(init.standard_normal(s).astype(np.float32) * 0.3) for s in shapes]
    momenta = [tf.Variable(tf.zeros(s)) for s in shapes]
    steps_per_epoch = len(x) // args.batch
    counters = {"steps run": 0}

    def boom(_):
        raise hvd.HorovodInternalError(f"test: rank {me} lost a peer")

    @tf.function
    def train_step(xb, yb, fail):
        with tf.GradientTape() as tape:
            hidden = tf.tanh(xb @ weights[0] + weights[1])
            loss = tf.reduce_mean((hidden @ weights[2] + weights[3] - yb) ** 2)
        grads = [hvd.allreduce(g, op=hvd.Average) for g in tape.gradient(loss, weights)]
        if fail:
            grads[0] += tf.numpy_function(boom, [tf.zeros(())], tf.float32, stateful=True)
        for w, m, g in zip(weights, momenta, grads):
            m.assign(0.9 * m + g)
            w.assign_sub(0.05 * m)

    def step(s):
        b = s % steps_per_epoch
        fail = s == args.fail and "fail" not in done
        done.add("fail") if fail else None
        train_step(x[b * args.batch:(b + 1) * args.batch], y[b * args.batch:(b + 1) * args.batch], fail)
        counters["steps run"] += 1

    total = args.epochs * steps_per_epoch
    if not args.elastic:
        hvd.broadcast_variables(weights + momenta, root_rank=0)
        for s in range(total):
            step(s)
    else:
        state = hvd.elastic.TensorFlowState(weights + momenta, step=0)
        state.register_reset_callbacks([lambda: resets["tf"].append(str(state.step))])

        @hvd.elastic.run
        def train(state):
            while state.step < total:
                step(state.step)
                state.step += 1
                if state.step % args.commit_every == 0:
                    state.commit()

        train(state)
    print(f"{me}: tf weights {digest([w.numpy() for w in weights])}", flush=True)
    print(f"{me}: tf steps run {counters['steps run']}", flush=True)
    return me


modes = args.mode.split(",")
for mode in modes:
    me = tf_main() if mode == "tf" else keras_main()
    print(f"{me}: {mode} resets {','.join(resets[mode])}", flush=True)
print(f"{me}: done", flush=True)
