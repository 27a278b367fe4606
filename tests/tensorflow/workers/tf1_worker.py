"""TensorFlow 1-style (graph-mode, tf.compat.v1) scripts on ring, run under
ringrun -np 2 with eager execution disabled, as Horovod's first example:
DistributedOptimizer around a tf.compat.v1.train optimizer,
broadcast_global_variables in a Session or BroadcastGlobalVariablesHook in
a MonitoredTrainingSession, visible_device_list set from local_rank().
Training on rank-sharded data (rank::size) must equal, on rank 0, one
process training on the global batch. Prints "<rank>: <scenario> ok".

Usage: tf1_worker.py SCENARIO...
"""

import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import ring_strategy.build_queries as build_queries  # noqa: E402
import ring_strategy.ops as np_ops  # noqa: E402
import ring_strategy.tensorflow as hvd  # noqa: E402
from tests.workers.checks import identical_rows, raises, run_scenarios  # noqa: E402

BATCH = 4  # per rank
STEPS = 6
LR = 0.01


def data(n):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS * BATCH * n, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 1)) + 0.3).astype(np.float32)
    return x, y


def initial_values(seed):
    rng = np.random.default_rng(100 + seed)
    return [rng.standard_normal(s).astype(np.float32) for s in [(4, 8), (8,), (8, 1), (1,)]]


def build(seed):
    """The model in the default graph: placeholders, loss and variables
    initialized from ``seed``'s values."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w1, b1, w2, b2 = [tf.compat.v1.get_variable(f"v{i}", initializer=tf.constant(v))
                      for i, v in enumerate(initial_values(seed))]
    pred = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
    return x, y, tf.reduce_mean(tf.square(pred - y)), [w1, b1, w2, b2]


def batches(x, y, r, n):
    """Rank r's batch of each step: its shard x[r::n], BATCH rows a step."""
    xs, ys = x[r::n], y[r::n]
    return [(xs[s * BATCH:(s + 1) * BATCH], ys[s * BATCH:(s + 1) * BATCH]) for s in range(STEPS)]


def session_config():
    config = tf.compat.v1.ConfigProto()
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = str(hvd.local_rank())
    return config


def reference(group=1):
    """One process, plain Adagrad, rank 0's initial values; each update on
    the global batch of ``group`` consecutive steps (every rank's batches of
    those steps)."""
    n = hvd.size()
    x, y = data(n)
    per_rank = [batches(x, y, r, n) for r in range(n)]
    with tf.Graph().as_default():
        px, py, loss, variables = build(seed=0)
        train = tf.compat.v1.train.AdagradOptimizer(LR).minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for s in range(0, STEPS, group):
                steps = [b[t] for t in range(s, s + group) for b in per_rank]
                sess.run(train, {px: np.concatenate([b[0] for b in steps]), py: np.concatenate([b[1] for b in steps])})
            return sess.run(variables)


def check_result(got, group=1):
    flat = np.concatenate([v.ravel() for v in got])
    identical_rows(np_ops.allgather(flat[None], name="tf1.replicas"), "replicas")
    if hvd.rank() == 0:
        want = reference(group)
        diff = max(np.abs(a - b).max() for a, b in zip(got, want))
        assert diff < 1e-5, f"max difference from one process on the global batch: {diff}"


def scenario_v1_session():
    """hvd.broadcast_global_variables(0) run in a plain Session."""
    r, n = hvd.rank(), hvd.size()
    x, y = data(n)
    with tf.Graph().as_default():
        px, py, loss, variables = build(seed=r)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(LR))
        assert isinstance(opt, tf.compat.v1.train.Optimizer), type(opt)
        train = opt.minimize(loss)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session(config=session_config()) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(bcast)
            for bx, by in batches(x, y, r, n):
                sess.run(train, {px: bx, py: by})
            got = sess.run(variables)
            assert opt.get_slot(variables[0], "accumulator") is not None
    check_result(got)


def scenario_v1_monitored():
    """BroadcastGlobalVariablesHook(0) in a MonitoredTrainingSession with a
    global step and StopAtStepHook."""
    r, n = hvd.rank(), hvd.size()
    x, y = data(n)
    with tf.Graph().as_default():
        px, py, loss, variables = build(seed=r)
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(LR))
        train = opt.minimize(loss, global_step=step)
        hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.compat.v1.train.StopAtStepHook(last_step=STEPS)]
        feeds = iter(batches(x, y, r, n))
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, config=session_config()) as sess:
            while not sess.should_stop():
                bx, by = next(feeds)
                sess.run(train, {px: bx, py: by})
            got = sess.run_step_fn(lambda step_context: step_context.session.run(variables))
        assert next(feeds, None) is None, "the hooks stopped early"
    check_result(got)


def scenario_v1_aggregation():
    """backward_passes_per_step=2 with average_aggregated_gradients: one
    reduction and one update every 2 runs, equal to one process updating on
    2 global batches at a time; the global step counts every run."""
    r, n = hvd.rank(), hvd.size()
    x, y = data(n)
    with tf.Graph().as_default():
        px, py, loss, variables = build(seed=r)
        unused = tf.compat.v1.get_variable("unused", initializer=tf.constant([1.0]))  # its gradient is None
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(LR), backward_passes_per_step=2,
                                       average_aggregated_gradients=True)
        train = opt.minimize(loss, global_step=step, var_list=[unused] + variables)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session(config=session_config()) as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            sess.run(bcast)
            for bx, by in batches(x, y, r, n):
                sess.run(train, {px: bx, py: by})
            got = sess.run(variables)
            assert sess.run(step) == STEPS, sess.run(step)
    check_result(got, group=2)


def scenario_v1_local_var():
    """A variable registered with register_local_var keeps its own gradient
    (divided by size): its values differ between ranks, the others do not."""
    r, n = hvd.rank(), hvd.size()
    with tf.Graph().as_default():
        shared = tf.compat.v1.get_variable("shared", initializer=tf.constant([1.0, 1.0]))
        local = tf.compat.v1.get_variable("local", initializer=tf.constant([1.0, 1.0]))
        loss = tf.reduce_sum((shared + local) * float(r + 1))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
        opt.register_local_var(local)
        grads = dict((v.name, g) for g, v in opt.compute_gradients(loss, [shared, local]))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            g_shared, g_local = sess.run([grads["shared:0"], grads["local:0"]])
    mean = sum(k + 1 for k in range(n)) / n
    np.testing.assert_allclose(g_shared, [mean, mean], rtol=1e-6)
    np.testing.assert_allclose(g_local, [(r + 1) / n] * 2, rtol=1e-6)


def scenario_build_queries():
    for name in build_queries.__all__:
        query = getattr(hvd, name)
        assert query is getattr(build_queries, name), name
        assert query() in (False, 0), name  # this machine: no CUDA driver, no NCCL


def scenario_v1_errors():
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    raises(ValueError, lambda: hvd.DistributedOptimizer("sgd"), "Got: 'sgd'")
    raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, op=hvd.Max), "Average or Sum")
    raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, gradient_predivide_factor=0), "Got: 0")
    raises(ValueError, lambda: hvd.DistributedOptimizer(sgd, backward_passes_per_step=0), "Got: 0")
    raises(ValueError, lambda: hvd.BroadcastGlobalVariablesHook("0"), "Got: '0'")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}

if __name__ == "__main__":
    hvd.init()
    run_scenarios(SCENARIOS, sys.argv[1:], hvd.rank(), stop_at_failure=True)
    hvd.shutdown()
