"""Keras 3 on the torch backend with ``jit_compile=True`` (torch.compile) and
ring's DistributedOptimizer, run under ``ringrun -np 2`` with
KERAS_BACKEND=torch: `python torch_compile_worker.py CHECK...`.

Checks, each printing "<rank>: <check> ok" (tests/workers/checks.py):

- reduce_op: the optimizer's torch reduction, traced by Dynamo with
  ``fullgraph=True``, is one graph without breaks and reduces.
- fit: ``model.fit`` with ``jit_compile=True`` trains the same weights on
  every rank as ``jit_compile=False`` does.
- fit_breaks: no graph break of that fit lies in ring's code (only Keras' own
  remain: ``loss.backward()`` inside its train step, the optimizer's scalar
  learning rate).
"""

import logging
import re
import sys

import numpy as np

import keras
import keras_callbacks as hvd
import torch
from tests.workers.checks import close, identical_rows, run_scenarios

N = ME = 0
_OUR_CODE = re.compile(r"in user code at (\S*/(?:ring_strategy|keras_callbacks)/\S+)")


class _BreakLocations(logging.Handler):
    """Collects where Dynamo's graph breaks happened (its graph_breaks log)."""

    def __init__(self):
        super().__init__()
        self.ours = []

    def emit(self, record):
        if record.name.endswith("__graph_breaks"):
            self.ours += _OUR_CODE.findall(record.getMessage())


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])


def data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 4)).astype("float32")
    return x, (x @ rng.standard_normal((4, 1))).astype("float32")


def fit(jit_compile):
    """Weights after one epoch on this rank's half of the data."""
    x, y = data()
    model = make_model(seed=1)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse", jit_compile=jit_compile)
    model.fit(x[ME::N], y[ME::N], batch_size=4, epochs=1, shuffle=False, verbose=0)
    return np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])


# ---------------------------------------------------------------- checks
def reduce_op():
    from keras_callbacks.optimizer import _torch_allreduce

    def reduce(a, b):
        return _torch_allreduce()([a, b], ["compile.keras.a", "compile.keras.b"], hvd.Average, 1.0, 1.0,
                                  hvd.global_process_set)

    a, b = torch.full((3,), float(ME)), torch.full((2,), float(ME + 1), dtype=torch.float64)
    explained = torch._dynamo.explain(reduce)(a, b)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    got = torch.compile(reduce, fullgraph=True, backend="aot_eager")(a, b)
    close(got[0], torch.full((3,), (N - 1) / 2), "float32")
    close(got[1], torch.full((2,), (N + 1) / 2, dtype=torch.float64), "float64")


def fit_eager_and_compiled():
    breaks = _BreakLocations()
    logging.getLogger("torch._dynamo").addHandler(breaks)  # the graph_breaks artifact logs below it
    torch._logging.set_logs(graph_breaks=True)
    compiled = fit(jit_compile=True)
    torch._logging.set_logs()
    identical_rows(hvd.allgather(compiled[None]), "replicas")
    close(compiled, fit(jit_compile=False), "jit_compile=True against False", rtol=1e-5)
    return sorted(set(breaks.ours))


def main():
    global N, ME
    hvd.init()
    N, ME = hvd.size(), hvd.rank()
    found = {}  # "ours": the break locations in ring's code, once fit ran

    def fit_breaks():
        assert "ours" in found, "the fit check did not run"
        assert not found["ours"], f"graph breaks in ring's code: {found['ours']}"

    scenarios = {"reduce_op": reduce_op, "fit": lambda: found.update(ours=fit_eager_and_compiled()),
                 "fit_breaks": fit_breaks}
    run_scenarios(scenarios, sys.argv[1:], ME, after_each=hvd.barrier)
    hvd.shutdown()


if __name__ == "__main__":
    main()
