"""ring_strategy.mxnet on real workers (``ringrun -np N python mxnet_scenarios.py``):
each scenario prints ``<rank>: <name> ok`` (see tests/workers/checks.py).

Training scenarios check that N workers, each on its share of a global
batch, end with the parameters one process gets by training plain Gluon on
the whole batch."""

from __future__ import annotations

from typing import Callable, Dict

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import ring_strategy.mxnet as hvd
from tests.workers.checks import close, equal, identical_rows, raises, run_scenarios

GLOBAL_BATCH, STEPS = 12, 3
SGD = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}


def nd(values, dtype="float32"):
    return mx.nd.array(np.asarray(values), dtype=dtype)


def collectives():
    n, me = hvd.size(), hvd.rank()
    x = nd(np.arange(6).reshape(2, 3) + me)
    total = sum(np.arange(6).reshape(2, 3) + r for r in range(n)).astype(np.float32)
    average = hvd.allreduce(x)
    assert isinstance(average, mx.nd.NDArray) and average.dtype == np.float32, average
    close(average.asnumpy(), total / n, "average")
    equal(hvd.allreduce(nd(np.arange(5) * (me + 1), "int32"), average=False).asnumpy(),
          (np.arange(5) * sum(range(1, n + 1))).astype(np.int32), "int32 sum")
    close(hvd.allreduce(x, average=False, prescale_factor=2.0, postscale_factor=0.5).asnumpy(), total, "scaled")
    equal(x.asnumpy(), np.arange(6).reshape(2, 3) + me, "allreduce leaves its input", dtype=False)
    y = x.copy()
    assert hvd.allreduce_(y, average=False, name="in_place") is y
    close(y.asnumpy(), total, "allreduce_")
    group = [nd(np.full(3, me, np.float64), "float64"), nd(np.full((2, 2), me + 1))]
    out = hvd.grouped_allreduce(group, average=False)
    close(out[0].asnumpy(), np.full(3, sum(range(n)), np.float64), "grouped 0")
    close(out[1].asnumpy(), np.full((2, 2), sum(range(1, n + 1)), np.float32), "grouped 1")
    assert hvd.grouped_allreduce_(group, name="group") is group
    close(group[1].asnumpy(), np.full((2, 2), sum(range(1, n + 1)) / n, np.float32), "grouped_ in place")
    gathered = hvd.allgather(nd(np.full((me + 1, 2), me)))
    equal(gathered.asnumpy(), np.concatenate([np.full((r + 1, 2), r, np.float32) for r in range(n)]), "allgather")
    root = n - 1
    equal(hvd.broadcast(nd([me, me]), root_rank=root).asnumpy(), np.array([root, root], np.float32), "broadcast")
    z = nd([me])
    assert hvd.broadcast_(z, root) is z
    equal(z.asnumpy(), np.array([root], np.float32), "broadcast_")
    rows = nd(np.arange(2 * n) + 10 * me)
    want = np.concatenate([np.arange(2 * me, 2 * me + 2) + 10 * r for r in range(n)]).astype(np.float32)
    equal(hvd.alltoall(rows).asnumpy(), want, "alltoall")
    splits = [1] * (n - 1) + [n + 1]  # rank r sends rows to every rank, the rest to the last
    output, received = hvd.alltoall(nd(np.arange(2 * n)), splits=mx.nd.array(splits, dtype="int32"))
    equal(received.asnumpy(), np.full(n, splits[me], np.int32), "received splits")
    assert output.shape[0] == n * splits[me], output.shape
    assert hvd.broadcast_object({"me": me}, root_rank=0) == {"me": 0}
    assert hvd.allgather_object(("rank", me)) == [("rank", r) for r in range(n)]


def errors():
    n = hvd.size()
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(np.ones(3)), "mxnet NDArray", "ndarray")
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(nd([1.0]), average="yes"), "average")
    raises(hvd.BadArgumentError, lambda: hvd.broadcast(nd([1.0]), root_rank=n, name="bad_root"), "root")
    raises(hvd.BadArgumentError, lambda: hvd.DistributedTrainer({}, "sgd", gradient_predivide_factor=0),
           "gradient_predivide_factor")
    raises(hvd.BadArgumentError, lambda: hvd.Compression.bf16.compress(nd([1.0])), "fp16")
    raises(ValueError, lambda: hvd.broadcast_parameters([nd([1.0])]), "invalid params")
    assert not (hvd.mpi_built() or hvd.nccl_built() or hvd.gloo_built() or hvd.cuda_built())
    hvd.allreduce(nd([1.0]), name="after_errors")  # the job still works


def my_rows(*arrays: np.ndarray):
    """This rank's consecutive share of each array's rows."""
    share = GLOBAL_BATCH // hvd.size()
    return [a[hvd.rank() * share:(hvd.rank() + 1) * share] for a in arrays]


def make_net(seed: int) -> gluon.nn.Sequential:
    mx.random.seed(seed)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(8, activation="tanh", in_units=4), gluon.nn.Dense(1, in_units=8))
    net.initialize(mx.init.Uniform(0.5))
    return net


def flat(net: gluon.Block) -> np.ndarray:
    return np.concatenate([p.data().asnumpy().reshape(-1) for _, p in sorted(net.collect_params().items())])


def fit(net: gluon.Block, trainer: gluon.Trainer, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    loss_fn = gluon.loss.L2Loss()
    for _ in range(STEPS):
        with autograd.record():
            loss = loss_fn(net(nd(x)), nd(y))
        loss.backward()
        trainer.step(len(x))
    return flat(net)


def equals_one_process(make_trainer: Callable, rtol: float = 1e-5) -> Callable[[], None]:
    """A scenario: ``make_trainer(params)`` on this rank's rows vs plain SGD on all of them."""

    def scenario():
        rng = np.random.default_rng(7)
        x = rng.standard_normal((GLOBAL_BATCH, 4)).astype(np.float32)
        y = rng.standard_normal((GLOBAL_BATCH, 1)).astype(np.float32)
        net = make_net(seed=100 + hvd.rank())  # different on every rank until the broadcast
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        start = flat(net)
        identical_rows(hvd.allgather(nd(start[None])).asnumpy(), "parameters after broadcast")
        reference = make_net(seed=0)
        for mine, ref in zip(net.collect_params().values(), reference.collect_params().values()):
            ref.set_data(mine.data().copy())
        want = fit(reference, gluon.Trainer(reference.collect_params(), "sgd", dict(SGD), kvstore=None), x, y)
        got = fit(net, make_trainer(net.collect_params()), *my_rows(x, y))
        close(got, want, "parameters after training", rtol=rtol, atol=1e-6)
        assert not np.allclose(got, start), "training changed nothing"

    return scenario


def fit_module(x: np.ndarray, y: np.ndarray, optimizer: mx.optimizer.Optimizer) -> np.ndarray:
    """The Module API: a linear regression, STEPS updates on the whole of x."""
    out = mx.sym.LinearRegressionOutput(mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=1, name="fc"),
                                        name="lro")
    module = mx.mod.Module(out, data_names=["data"], label_names=["lro_label"])
    batches = mx.io.NDArrayIter(x, y, batch_size=len(x), label_name="lro_label")
    module.bind(batches.provide_data, batches.provide_label)
    module.init_params(mx.init.Constant(0.1))
    module.init_optimizer(optimizer=optimizer)
    for _ in range(STEPS):
        batches.reset()
        for batch in batches:
            module.forward_backward(batch)
            module.update()
    return module.get_params()[0]["fc_weight"].asnumpy()


def module_api_equals_one_process():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((GLOBAL_BATCH, 3)).astype(np.float32)
    y = rng.standard_normal((GLOBAL_BATCH, 1)).astype(np.float32)
    want = fit_module(x, y, mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / GLOBAL_BATCH))
    wrapped = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.1, rescale_grad=hvd.size() / GLOBAL_BATCH))
    got = fit_module(*my_rows(x, y), wrapped)
    close(got, want, "Module parameters after training", rtol=1e-5)


def deferred_init():
    net = gluon.nn.Dense(3)  # in_units unknown until the first forward pass
    net.initialize(mx.init.Uniform(1.0 + hvd.rank()))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="deferred.")
    net(nd(np.ones((2, 5))))
    identical_rows(hvd.allgather(nd(flat(net)[None])).asnumpy(), "deferred parameters")


def process_sets():
    """Collectives on dynamic process sets ([0] and the other ranks)."""
    n, me = hvd.size(), hvd.rank()
    if n == 1:
        return
    first, rest = hvd.add_process_set([0]), hvd.add_process_set(list(range(1, n)))
    mine = first if me == 0 else rest
    x = mx.nd.ones((3,)) * (me + 1)
    equal(hvd.allreduce(x, average=False, process_set=mine).asnumpy(),
          np.full(3, float(sum(r + 1 for r in mine.ranks)), np.float32), "allreduce on a set")
    equal(hvd.allgather(mx.nd.array([me]), process_set=mine).asnumpy(), np.array(mine.ranks, np.float32), "allgather")
    equal(hvd.broadcast(x, mine.ranks[-1], process_set=mine).asnumpy(), np.full(3, mine.ranks[-1] + 1.0, np.float32),
          "broadcast")
    assert hvd.allgather_object(me, process_set=mine) == mine.ranks
    assert hvd.remove_process_set(first) and hvd.remove_process_set(rest)


SCENARIOS: Dict[str, Callable[[], None]] = {
    "collectives": collectives,
    "process_sets": process_sets,
    "errors": errors,
    "trainer_equals_one_process": equals_one_process(
        lambda params: hvd.DistributedTrainer(params, "sgd", dict(SGD))),
    "trainer_predivide_equals_one_process": equals_one_process(
        lambda params: hvd.DistributedTrainer(params, "sgd", dict(SGD), gradient_predivide_factor=2.0, prefix="p.")),
    "trainer_fp16_close_to_one_process": equals_one_process(
        lambda params: hvd.DistributedTrainer(params, "sgd", dict(SGD), compression=hvd.Compression.fp16), rtol=1e-2),
    "optimizer_equals_one_process": equals_one_process(
        lambda params: gluon.Trainer(params, hvd.DistributedOptimizer(mx.optimizer.SGD(**SGD)))),
    "module_api_equals_one_process": module_api_equals_one_process,
    "deferred_init": deferred_init,
}

if __name__ == "__main__":
    hvd.init(process_sets="dynamic")
    ok = run_scenarios(SCENARIOS, SCENARIOS, hvd.rank())
    hvd.shutdown()
    raise SystemExit(0 if ok else 1)
