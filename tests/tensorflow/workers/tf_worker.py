"""ring_strategy.tensorflow on real workers: every collective eagerly and in
tf.function, their gradients, broadcast helpers and DistributedGradientTape
training checked against a single-process run, DistributedOptimizer eagerly. Prints "<rank>: <scenario> ok".

Usage: tf_worker.py SCENARIO...
"""

import os
import sys

import numpy as np
import tensorflow as tf

import ring_strategy.tensorflow as hvd
from tests.workers.checks import close, equal, identical_rows, raises, run_scenarios
from tf_adasum import scenario_adasum_allreduce, scenario_adasum_errors, scenario_adasum_gradient  # noqa: F401


def ops_cases():
    """(compute, expected, tolerance) for every collective: compute() builds
    all results at once, so that it can run eagerly or as one tf.function."""
    r, n = hvd.rank(), hvd.size()
    computes, expected = [], []

    def case(fn, want, tol=0.0):
        computes.append(fn)
        expected.append((want, tol))

    for dtype in [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16, tf.bfloat16]:
        x = lambda d=dtype: tf.cast(tf.reshape(tf.range(6), [2, 3]) + r, d)  # noqa: E731
        total = sum(np.arange(6).reshape(2, 3) + q for q in range(n))
        case(lambda x=x: hvd.allreduce(x(), op=hvd.Sum), tf.cast(total, dtype).numpy())
        if dtype.is_floating:
            case(lambda x=x: hvd.allreduce(x()), tf.cast(total / n, dtype).numpy(), 1e-2)
    x = lambda: tf.fill([3], float(r + 1))  # noqa: E731
    tri = np.full(3, n * (n + 1) / 2, np.float32)
    case(lambda: hvd.allreduce(x(), op=hvd.Max), np.full(3, float(n), np.float32))
    case(lambda: hvd.allreduce(x(), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), tri)
    case(lambda: hvd.allreduce(x(), op=hvd.Sum, compression=hvd.Compression.fp16), tri)
    case(lambda: hvd.grouped_allreduce([x(), tf.ones([2, 2], tf.int32)], op=hvd.Sum),
         [tri, np.full((2, 2), n, np.int32)])
    # allgather with a different first dimension on each rank
    case(lambda: hvd.allgather(tf.fill([r + 1, 2], r)),
         np.concatenate([np.full((q + 1, 2), q, np.int32) for q in range(n)]))
    case(lambda: hvd.broadcast(tf.constant([r, r], tf.float64), n - 1), np.full(2, n - 1, np.float64))
    # alltoall: rank r sends q + 1 rows to rank q, each row = [r, q]
    splits = [q + 1 for q in range(n)]
    rows = np.concatenate([np.tile([r, q], (q + 1, 1)) for q in range(n)]).astype(np.float32)
    case(lambda: hvd.alltoall(tf.constant(rows), splits=tf.constant(splits)),
         [np.concatenate([np.tile([q, r], (r + 1, 1)) for q in range(n)]).astype(np.float32),
          np.full(n, r + 1, np.int32)])
    case(lambda: hvd.alltoall(tf.fill([2 * n], float(r)))[0], np.repeat(np.arange(n, dtype=np.float32), 2))
    # reducescatter of 2n+1 rows: rank 0 gets one extra row
    full = np.arange((2 * n + 1) * 2, dtype=np.float32).reshape(-1, 2)
    counts = [2 + (1 if q < 1 else 0) for q in range(n)]
    start = sum(counts[:r])
    case(lambda: hvd.reducescatter(tf.constant(full), op=hvd.Sum), full[start:start + counts[r]] * n)
    case(lambda: hvd.allreduce(tf.zeros([0, 3]), op=hvd.Sum), np.zeros((0, 3), np.float32))
    case(lambda: hvd.allreduce(tf.constant(float(r)), op=hvd.Sum), np.float32(n * (n - 1) / 2))
    case(lambda: hvd.broadcast(tf.constant(r), 0), np.int32(0))
    return (lambda: [fn() for fn in computes]), expected


def ops_checks(run):
    compute, expected = ops_cases()
    results = run(compute)
    assert len(results) == len(expected)
    for got, (want, tol) in zip(results, expected):
        for g, w in zip(got, want) if isinstance(want, list) else [(got, want)]:
            if tol:
                close(g, w, rtol=tol, atol=tol, dtype=False)
            else:
                equal(g, w, dtype=False)


def scenario_eager_ops():
    ops_checks(lambda f: f())


def scenario_function_ops():
    ops_checks(lambda f: tf.function(f)())


def scenario_gradients():
    r, n = hvd.rank(), hvd.size()

    @tf.function
    def grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            a = hvd.allreduce(x * float(r + 1), op=hvd.Sum)
            g = hvd.allgather(x)
            b = hvd.broadcast(x, 0)
            loss = tf.reduce_sum(a) + tf.reduce_sum(g * 2.0) + tf.reduce_sum(b * 3.0)
        return tape.gradient(loss, x)

    got = grads(tf.ones([2]))
    # d/dx: allreduce Sum grad = n * (r+1); allgather: summed 2*n; broadcast: 3*n on root, 0 elsewhere.
    expected = n * (r + 1) + 2 * n + (3 * n if r == 0 else 0)
    equal(got, np.full(2, expected, np.float32))
    # Eagerly, under a tape (autograd's path) and outside one (no custom
    # gradient is built): the same results, and the gradient flows.
    x = tf.ones([2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        a, b = hvd.grouped_allreduce([x * float(r + 1), x * 2.0], op=hvd.Sum)
        loss = tf.reduce_sum(a) + tf.reduce_sum(b)
    equal(tape.gradient(loss, x), np.full(2, n * (r + 1) + 2 * n, np.float32))
    equal(a, np.full(2, n * (n + 1) / 2, np.float32))
    outside = hvd.grouped_allreduce([x * float(r + 1), x * 2.0], op=hvd.Sum)
    equal(outside[0], a.numpy())
    equal(outside[1], b.numpy())


def scenario_broadcast_helpers():
    r = hvd.rank()
    v = tf.Variable(tf.fill([3], float(r)))
    w = tf.Variable(tf.fill([2, 2], r), dtype=tf.int32)
    hvd.broadcast_variables([v, w], root_rank=1)
    equal(v, np.full(3, 1.0, np.float32))
    equal(w, np.full((2, 2), 1, np.int32))
    v2 = tf.Variable(tf.fill([2], float(r)))
    @tf.function
    def bcast():
        hvd.broadcast_variables([v2], root_rank=0)

    bcast()
    equal(v2, np.zeros(2, np.float32))
    obj = hvd.broadcast_object({"rank": r, "data": list(range(r + 3))}, root_rank=1)
    assert obj == {"rank": 1, "data": [0, 1, 2, 3]}, obj
    assert hvd.allgather_object(("r", r)) == [("r", q) for q in range(hvd.size())]


def scenario_errors():
    for call, text in [
        (lambda: hvd.allreduce(tf.ones(2), op=42), "Got: 42"),
        (lambda: hvd.allreduce(tf.ones(2), op=hvd.Sum, average=True), "supersedes"),
        (lambda: hvd.alltoall(tf.ones(3 * hvd.size() + 1)), "divisible"),
        (lambda: hvd.DistributedGradientTape("tape"), "Got: 'tape'"),
        (lambda: hvd.allreduce(tf.ones(2), process_set="x"), "Got: 'x'"),
    ]:
        raises((ValueError, NotImplementedError), call, text)
    compiled = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum), jit_compile=True)
    if os.environ.get("RING_NATIVE_OPS") == "0":  # host calls cannot enter XLA-compiled code
        raises(Exception, lambda: compiled(tf.ones(2)), "jit_compile=False")
    else:
        assert np.array_equal(compiled(tf.ones(2)).numpy(), [hvd.size()] * 2)
        raises(Exception, lambda: tf.function(lambda t: hvd.join(), jit_compile=True)(tf.ones(1)),
               "join has no XLA lowering", "jit_compile=False")
        uneven = tf.function(lambda t: hvd.alltoall(t, splits=[1] * hvd.size()), jit_compile=True)
        raises(Exception, lambda: uneven(tf.ones(hvd.size())), "even blocks", "without splits")


def _model_and_data():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 1))).astype(np.float32)
    w1 = tf.Variable(rng.standard_normal((4, 6)).astype(np.float32))
    b1 = tf.Variable(np.zeros(6, np.float32))
    w2 = tf.Variable(rng.standard_normal((6, 1)).astype(np.float32))
    return x, y, [w1, b1, w2]


def _train(variables, x, y, batch, distributed, steps_per_epoch, epochs=3):
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9) if hasattr(tf, "keras") else None

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            h = tf.tanh(xb @ variables[0] + variables[1])
            loss = tf.reduce_mean((h @ variables[2] - yb) ** 2)
        if distributed:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, variables)
        for v, g in zip(variables, grads):
            v.assign_sub(0.05 * g)
        return loss

    for _ in range(epochs):
        for i in range(steps_per_epoch):
            step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
    return [v.numpy() for v in variables]


def scenario_gradient_tape():
    r, n = hvd.rank(), hvd.size()
    x, y, variables = _model_and_data()
    if r != 0:  # different start; broadcast_variables makes them rank 0's
        for v in variables:
            v.assign(v + 1.0)
    hvd.broadcast_variables(variables, root_rank=0)
    xs, ys = x[r::n], y[r::n]
    got = _train(variables, xs, ys, batch=8 // n, distributed=True, steps_per_epoch=len(xs) // (8 // n))
    flat = np.concatenate([g.ravel() for g in got])
    identical_rows(hvd.allgather(tf.constant(flat[None])))
    _, _, ref_vars = _model_and_data()
    ref = _train(ref_vars, x, y, batch=8, distributed=False, steps_per_epoch=len(x) // 8)
    diff = max(np.abs(a - b).max() for a, b in zip(got, ref))
    assert diff < 1e-5, diff
    # Eagerly too, with bf16 compression: replicas stay identical.
    w = tf.Variable(tf.ones([3]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(r + 1))
    g, = hvd.DistributedGradientTape(tape, compression=hvd.Compression.bf16).gradient(loss, [w])
    equal(g, np.full(3, (n + 1) / 2, np.float32))
    print(f"{r}: max diff to single process {diff:.2g}", flush=True)


def scenario_optimizer_eager():
    """DistributedOptimizer eagerly: a tf.compat.v1.train optimizer's
    compute_gradients averages; a Keras optimizer is wrapped by
    keras_callbacks; broadcast_global_variables asks for broadcast_variables."""
    r, n = hvd.rank(), hvd.size()
    w = tf.Variable(tf.ones([3]))
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    (g, v), = opt.compute_gradients(lambda: tf.reduce_sum(w * float(r + 1)), [w])
    close(g, np.full(3, (n + 1) / 2, np.float32))
    opt.apply_gradients([(g, v)])
    close(w, np.full(3, 1 - (n + 1) / 2, np.float32))
    import keras

    kopt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=hvd.Compression.fp16)
    assert isinstance(kopt, keras.optimizers.SGD), type(kopt).__mro__
    assert type(kopt).__mro__[1].__name__ == "_DistributedMixin", type(kopt).__mro__
    assert kopt._ring_compression.__name__ == "FP16Compressor", kopt._ring_compression
    raises(RuntimeError, lambda: hvd.broadcast_global_variables(0), "broadcast_variables")
    raises(ValueError, lambda: hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                                        backward_passes_per_step=2), "eager execution")


if __name__ == "__main__":
    hvd.init()
    scenarios = {name[len("scenario_"):]: f for name, f in list(globals().items()) if name.startswith("scenario_")}
    run_scenarios(scenarios, sys.argv[1:], hvd.rank(), stop_at_failure=True)
    hvd.shutdown()
