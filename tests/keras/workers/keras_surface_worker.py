"""The rest of horovod.keras' surface on real workers, with the backend chosen
by KERAS_BACKEND: broadcast_object and allgather_object, allreduce and
reducescatter with Horovod's arguments on backend tensors, the timeline
started from the script, PartialDistributedOptimizer, Horovod's exceptions and
build queries. Prints
"<rank>: <scenario> ok".

Usage: keras_surface_worker.py OUT_DIR SCENARIO...
"""

import os
import sys

import numpy as np

import keras
import keras_callbacks as hvd
import ring_strategy
from ring_strategy.timeline import load as load_timeline
from tests.workers.checks import close, equal, raises, run_scenarios

OUT_DIR = ""


def scenario_objects():
    """broadcast_object gives rank 0's object everywhere; allgather_object
    every rank's, in rank order (different sizes and types)."""
    r, n = hvd.rank(), hvd.size()
    got = hvd.broadcast_object({"lr": 0.1, "rank": r} if r == 0 else None, root_rank=0)
    assert got == {"lr": 0.1, "rank": 0}, got
    got = hvd.broadcast_object(["x"] * (r + 1), root_rank=n - 1, name="keras_surface.bcast")
    assert got == ["x"] * n, got
    mine = {"rank": r, "data": list(range(r * 3))} if r % 2 == 0 else f"rank {r}"
    everyone = hvd.allgather_object(mine)
    want = [{"rank": q, "data": list(range(q * 3))} if q % 2 == 0 else f"rank {q}" for q in range(n)]
    assert everyone == want, everyone
    raises(hvd.BadArgumentError, lambda: hvd.broadcast_object(1, root_rank="0"), "root_rank")


def scenario_values():
    """allreduce(value, name=None, average=None, ..., op=None, compression=),
    reducescatter(value, name=None, op=Average), allgather and broadcast on
    backend tensors, numpy arrays and Python numbers; numpy results."""
    r, n = hvd.rank(), hvd.size()
    x = keras.ops.convert_to_tensor(np.full((2, 3), r + 1.0, np.float32))
    tri = n * (n + 1) / 2
    equal(hvd.allreduce(x, "keras_surface.avg"), np.full((2, 3), tri / n, np.float32))
    equal(hvd.allreduce(x, name="keras_surface.sum", op=hvd.Sum), np.full((2, 3), tri, np.float32))
    with_warning = hvd.allreduce(x, average=False)
    equal(with_warning, np.full((2, 3), tri, np.float32))
    equal(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), np.full((2, 3), tri, np.float32))
    equal(hvd.allreduce(float(r), op=hvd.Max), np.float64(n - 1))
    fp16 = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    equal(fp16, np.full((2, 3), tri, np.float32))
    out = np.full(3, r + 1.0, np.float32)
    assert hvd.allreduce(out, op=hvd.Sum, out=out) is out
    equal(out, np.full(3, tri, np.float32))
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(x, average=True, op=hvd.Sum), "supersedes average")
    rows = keras.ops.convert_to_tensor(np.arange(2 * n * 2, dtype=np.float32).reshape(2 * n, 2))
    full = np.arange(2 * n * 2, dtype=np.float32).reshape(2 * n, 2)
    equal(hvd.reducescatter(rows, "keras_surface.rs", hvd.Sum), full[2 * r:2 * r + 2] * n)
    equal(hvd.reducescatter(rows), full[2 * r:2 * r + 2])
    equal(hvd.allgather(keras.ops.convert_to_tensor(np.full((r + 1, 2), r, np.int32)), "keras_surface.gather"),
          np.concatenate([np.full((q + 1, 2), q, np.int32) for q in range(n)]))
    equal(hvd.broadcast(x, n - 1, "keras_surface.bcast_value"), np.full((2, 3), float(n), np.float32))


def scenario_timeline():
    """start_timeline / stop_timeline from the script: rank 0's file holds
    the tensors reduced in between."""
    path = os.path.join(OUT_DIR, f"keras_{keras.backend.backend()}_timeline.json")
    hvd.start_timeline(path)
    hvd.allreduce(np.ones(4, np.float32), name="keras_surface.timeline.tensor")
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        names = {e["args"]["name"] for e in load_timeline(path) if e.get("name") == "process_name"}
        assert "keras_surface.timeline.tensor" in names, names


def _partial_fit(scale):
    """One SGD step of x -> Dense(1) [shared] -> Dense(1) [local] with mae
    loss (gradient +1 on the prediction); returns both kernels."""
    r = hvd.rank()
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="ones"),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=model.layers[1],
                                          scale_local_gradients=scale, name=f"partial{int(scale)}")
    model.compile(optimizer=opt, loss="mae", jit_compile=False)
    model.fit(np.full((1, 2), r + 1.0, np.float32), np.full((1, 1), -100.0, np.float32), batch_size=1, epochs=1,
              verbose=0)
    return [np.asarray(w) for w in model.get_weights()]


def scenario_partial_optimizer():
    """PartialDistributedOptimizer: the local layer's gradient (2(r+1), from
    h = 2(r+1)) stays on its rank, divided by size() with
    scale_local_gradients; the shared layer's (r+1 per weight) is averaged."""
    r, n = hvd.rank(), hvd.size()
    for scale, div in ((True, n), (False, 1)):
        shared, local = _partial_fit(scale)
        close(shared, np.full((2, 1), 1 - 0.1 * (n + 1) / 2, np.float32))
        close(local, np.full((1, 1), 1 - 0.1 * 2 * (r + 1) / div, np.float32))
    raises(hvd.BadArgumentError, lambda: hvd.PartialDistributedOptimizer(keras.optimizers.SGD(), local_layers=["x"]),
           "Keras layers")
    layer = keras.layers.Dense(1)
    layer.build((None, 2))
    raises(NotImplementedError, lambda: hvd.PartialDistributedOptimizer(
        keras.optimizers.SGD(), backward_passes_per_step=2, local_layers=layer), "backward_passes_per_step")


def scenario_exports():
    """Horovod's exceptions (the core's classes) and build queries (False:
    CPU engine, no MPI, Gloo or NCCL) are exported."""
    assert hvd.HorovodInternalError is ring_strategy.HorovodInternalError
    assert hvd.HostsUpdatedInterrupt is ring_strategy.HostsUpdatedInterrupt
    for query in ["mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
                  "ddl_built", "ccl_built", "cuda_built", "rocm_built"]:
        assert getattr(hvd, query)() is False, query  # this machine: no CUDA driver
    assert hvd.nccl_built() == 0  # no NCCL found (else its version code)
    close(hvd.allreduce(np.float32(hvd.rank())), np.float32((hvd.size() - 1) / 2))


if __name__ == "__main__":
    OUT_DIR = sys.argv[1]
    hvd.init()
    scenarios = {name[len("scenario_"):]: f for name, f in list(globals().items()) if name.startswith("scenario_")}
    run_scenarios(scenarios, sys.argv[2:], hvd.rank(), stop_at_failure=True)
    hvd.shutdown()
