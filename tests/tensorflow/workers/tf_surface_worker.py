"""The rest of horovod.tensorflow's surface on real workers: grouped allgather
and reducescatter (eagerly, in tf.function, with gradients), join, the
timeline started from the script, SyncBatchNormalization against one process
on the global batch, PartialDistributedGradientTape, broadcast_ and
broadcast_object_fn, and the process queries as ops. Prints "<rank>: <scenario> ok".

Usage: tf_surface_worker.py OUT_DIR SCENARIO...
"""

import os
import sys

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd
from ring_strategy.timeline import load as load_timeline
from tests.workers.checks import close, equal, raises, run_scenarios

OUT_DIR = ""


def _gathered(n, rows_of, fill_of, cols):
    return np.concatenate([np.full((rows_of(q), cols), fill_of(q), np.float32) for q in range(n)])


def scenario_grouped_allgather():
    """Each tensor of the group gathered as allgather would, eagerly and in
    tf.function; the gradient of each is this rank's rows of the summed
    gradient."""
    r, n = hvd.rank(), hvd.size()

    def compute():
        return hvd.grouped_allgather([tf.fill([r + 1, 2], float(r)), tf.fill([2 - r % 2, 3], r * 10),
                                      tf.constant(float(r))])

    want = [_gathered(n, lambda q: q + 1, float, 2),
            _gathered(n, lambda q: 2 - q % 2, lambda q: q * 10, 3).astype(np.int32),
            np.arange(n, dtype=np.float32)]
    for run in (lambda f: f(), lambda f: tf.function(f)()):
        got = run(compute)
        assert len(got) == 3, got
        for g, w in zip(got, want):
            equal(g, w)
    assert hvd.grouped_allgather([]) == []

    a, b = tf.Variable(tf.ones([r + 1, 2])), tf.Variable(tf.ones([3]))
    for run in (lambda f: f(), lambda f: tf.function(f)()):
        def grads():
            with tf.GradientTape() as tape:
                ga, gb = hvd.grouped_allgather([a, b], name=None)
                # Rank q weighs the gathered rows by q + 1: the summed weight is n(n+1)/2.
                loss = tf.reduce_sum(ga) * float(r + 1) + tf.reduce_sum(gb) * float(r + 1)
            return tape.gradient(loss, [a, b])

        da, db = run(grads)
        equal(da, np.full((r + 1, 2), n * (n + 1) / 2, np.float32))
        equal(db, np.full(3, n * (n + 1) / 2, np.float32))


def scenario_grouped_reducescatter():
    """Each tensor reduce-scattered as reducescatter would (rows that do not
    divide evenly included), with scale factors, compression and gradients."""
    r, n = hvd.rank(), hvd.size()
    full_a = np.arange((2 * n + 1) * 2, dtype=np.float32).reshape(-1, 2)
    full_b = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    counts = [2 + (1 if q < 1 else 0) for q in range(n)]
    start = sum(counts[:r])

    def compute():
        return hvd.grouped_reducescatter([tf.constant(full_a) + r, tf.constant(full_b)], op=hvd.Sum)

    for run in (lambda f: f(), lambda f: tf.function(f)()):
        ga, gb = run(compute)
        equal(ga, full_a[start:start + counts[r]] * n + n * (n - 1) / 2)
        equal(gb, full_b[r:r + 1] * n)
    avg, = hvd.grouped_reducescatter([tf.constant(full_a)], op=hvd.Average, prescale_factor=2.0,
                                     compression=hvd.Compression.fp16)
    close(avg, full_a[start:start + counts[r]] * 2, rtol=1e-3, atol=1e-3)
    assert hvd.grouped_reducescatter([]) == []
    raises(hvd.BadArgumentError, lambda: hvd.grouped_reducescatter([tf.constant(1.0)]), "at least one dimension")

    x = tf.Variable(tf.constant(full_a))
    with tf.GradientTape() as tape:
        y, = hvd.grouped_reducescatter([x], op=hvd.Average, postscale_factor=3.0)
        loss = tf.reduce_sum(y) * float(r + 1)
    # d loss / d x: every rank's weight gathered back, times 3 / n.
    weights = np.concatenate([np.full((counts[q], 2), q + 1.0, np.float32) for q in range(n)])
    close(tape.gradient(loss, x), weights * 3.0 / n)


def scenario_join():
    """Rank 1 joins first: the other ranks' allreduces (eager, tf.function and
    DistributedGradientTape) go on with zeros from rank 1; join returns the
    rank that joined last, the same on every rank. Run last: the tape's
    automatic name is not used on rank 1, so later unnamed tapes would
    differ between the ranks."""
    r, n = hvd.rank(), hvd.size()
    busy = n - 1  # ranks with data
    if r == 1:
        last = hvd.join()
    else:
        equal(hvd.allreduce(tf.fill([3], 4.0), name="tf_surface.joined"), np.full(3, 4.0 * busy / n, np.float32))
        equal(tf.function(lambda: hvd.allreduce(tf.fill([2], 6.0), op=hvd.Sum))(), np.full(2, 6.0 * busy, np.float32))
        w = tf.Variable(tf.ones([2]))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w) * 8.0
        g, = hvd.DistributedGradientTape(tape).gradient(loss, [w])
        close(g, np.full(2, 8.0 * busy / n, np.float32))
        last = tf.function(hvd.join)()
    assert last.dtype == tf.int32 and last.shape == (), last
    assert int(last) != 1, last
    # Every rank takes part in collectives again (named: the ranks' automatic
    # names differ after different paths), and agrees on the last rank.
    equal(hvd.allgather(tf.reshape(last, [1]), name="tf_surface.after_join"), np.full(n, int(last), np.int32))


def scenario_timeline():
    """start_timeline / stop_timeline from the script: rank 0's file holds
    the tensors reduced in between (and cycle marks), valid JSON once stopped."""
    path = os.path.join(OUT_DIR, "tf_timeline.json")
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(tf.ones([4]), name="tf_surface.timeline.tensor")
    tf.function(lambda: hvd.grouped_allgather([tf.ones([1])], name="tf_surface.timeline.group"))()
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        events = load_timeline(path)
        names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert {"tf_surface.timeline.tensor", "tf_surface.timeline.group.0"} <= names, names
        assert any(e.get("name") == "CYCLE_START" for e in events), "no cycle marks"


def _bn_model(layer_cls, seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4),
                                layer_cls(momentum=0.5, epsilon=1e-3), tf.keras.layers.Dense(2)])


def _bn_step(model, x, coeff):
    """One training-mode call: the output, d(sum(out * coeff)) / d(x) and the
    gradients of the weights."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = model(x, training=True)
        loss = tf.reduce_sum(out * coeff)
    grads = tape.gradient(loss, [x] + model.trainable_variables)
    return out, grads[0], grads[1:]


def scenario_sync_batch_norm():
    """Ranks with batches of 3 and 5 rows normalize like one process on the 8
    rows: outputs, input gradients, summed weight gradients and moving
    statistics; eagerly and in tf.function; inference uses the moving
    statistics."""
    r, n = hvd.rank(), hvd.size()
    rows = [3 + 2 * q for q in range(n)]
    rng = np.random.default_rng(7)
    x_all = rng.standard_normal((sum(rows), 3)).astype(np.float32) * 2 + 1
    c_all = rng.standard_normal((sum(rows), 2)).astype(np.float32)
    lo = sum(rows[:r])
    x, coeff = x_all[lo:lo + rows[r]], c_all[lo:lo + rows[r]]
    ref = _bn_model(tf.keras.layers.BatchNormalization, seed=1)
    ref_out, ref_dx, ref_dw = _bn_step(ref, x_all, c_all)
    for run in (lambda f: f(), lambda f: tf.function(f)()):
        model = _bn_model(hvd.SyncBatchNormalization, seed=1)
        out, dx, dw = run(lambda: _bn_step(model, x, coeff))
        close(out, ref_out[lo:lo + rows[r]], rtol=1e-4, atol=1e-5)
        close(dx, ref_dx[lo:lo + rows[r]], rtol=1e-4, atol=1e-5)
        for got, want in zip(hvd.grouped_allreduce(dw, op=hvd.Sum), ref_dw):
            close(got, want, rtol=1e-4, atol=1e-5)
        bn = model.layers[1]
        close(bn.moving_mean, ref.layers[1].moving_mean, rtol=1e-5, atol=1e-6)
        close(bn.moving_variance, ref.layers[1].moving_variance, rtol=1e-5, atol=1e-6)
        close(model(x, training=False), ref(x, training=False), rtol=1e-4, atol=1e-5)
    raises(ValueError, lambda: hvd.SyncBatchNormalization(fused=True), "fused=True")
    # In model.fit (a tf.function train step), with the optimizer averaging
    # the weights' gradients: the replicas and their moving statistics stay equal.
    model = _bn_model(hvd.SyncBatchNormalization, seed=2)
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1)), loss="mse")
    model.fit(x, coeff, batch_size=len(x), epochs=2, verbose=0)
    flat = np.concatenate([np.ravel(w) for w in model.get_weights()])
    gathered = hvd.allgather(tf.constant(flat[None]), name="tf_surface.bn_fit").numpy()
    close(gathered, np.repeat(flat[None], n, axis=0), rtol=1e-6, atol=1e-7)
    path = os.path.join(OUT_DIR, f"sync_bn_{r}.keras")
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    assert type(loaded.layers[1]) is hvd.SyncBatchNormalization, loaded.layers
    equal(loaded.layers[1].moving_variance, model.layers[1].moving_variance)


def scenario_partial_tape():
    """PartialDistributedGradientTape: the gradients of local_layers stay on
    their rank (divided by size() with scale_local_gradients), the others are
    averaged; register_local_source marks a variable local; eagerly and in
    tf.function."""
    r, n = hvd.rank(), hvd.size()
    local = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local.build((None, 2))
    shared = tf.Variable(tf.ones([3]))
    mine = tf.Variable(tf.ones([2]))
    x = tf.fill([1, 2], float(r + 1))

    def grads(scale):
        with tf.GradientTape() as tape:
            loss = (tf.reduce_sum(shared) + tf.reduce_sum(local(x)) + tf.reduce_sum(mine)) * float(r + 1)
        tape = hvd.PartialDistributedGradientTape(tape, local_layers=local, scale_local_gradients=scale)
        tape.register_local_source(mine)
        return tape.gradient(loss, [shared, local.kernel, mine])

    for run in (lambda f: f(), lambda f: tf.function(f)()):
        for scale, div in ((True, n), (False, 1)):
            g_shared, g_local, g_mine = run(lambda: grads(scale))
            equal(g_shared, np.full(3, (n + 1) / 2, np.float32))
            equal(g_local, np.full((2, 1), (r + 1) ** 2 / div, np.float32))
            equal(g_mine, np.full(2, (r + 1) / div, np.float32))
    raises(hvd.BadArgumentError, lambda: hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=["x"]),
           "Keras layers")


def scenario_broadcast_inplace():
    """broadcast_ assigns the root's values to the variables and returns
    them, eagerly and in tf.function; broadcast_object_fn is broadcast_object
    with its arguments fixed."""
    r, n = hvd.rank(), hvd.size()
    a, b = tf.Variable(tf.fill([2], float(r))), tf.Variable(tf.fill([3], r * 10))
    got = hvd.broadcast_([a, b], root_rank=n - 1, name="tf_surface.bcast_inplace")
    equal(got[0], np.full(2, n - 1.0, np.float32))
    equal(b, np.full(3, (n - 1) * 10, np.int32))
    a.assign(tf.fill([2], float(r)))
    tf.function(lambda: hvd.broadcast_([a], 0))()
    equal(a, np.zeros(2, np.float32))
    assert hvd.broadcast_([], 0) == []
    fn = hvd.broadcast_object_fn(root_rank=n - 1, name="tf_surface.object_fn")
    assert fn({"rank": r}) == {"rank": n - 1}


def scenario_process_ops():
    """size_op, rank_op, local_size_op, local_rank_op eagerly and in
    tf.function; the build queries and Horovod's exceptions are exported."""
    for run in (lambda f: f(), lambda f: tf.function(f)()):
        got = run(lambda: [hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op()])
        assert all(t.dtype == tf.int32 for t in got), got
        assert [int(t) for t in got] == [hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank()], got
    raises(hvd.BadArgumentError, lambda: hvd.size_op(process_set_id=1), "no process set has id 1")
    assert hvd.nccl_built() == 0 and hvd.mpi_threads_supported() is False
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


if __name__ == "__main__":
    OUT_DIR = sys.argv[1]
    hvd.init()
    scenarios = {name[len("scenario_"):]: f for name, f in list(globals().items()) if name.startswith("scenario_")}
    run_scenarios(scenarios, sys.argv[2:], hvd.rank(), stop_at_failure=True)
    hvd.shutdown()
