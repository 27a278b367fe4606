"""Keras 3 data-parallel training on ring: ``import keras_callbacks as hvd``.

Works on the TensorFlow, JAX and torch Keras backends (choose one with
``KERAS_BACKEND`` before importing keras), inside the compiled train step.
Besides the optimizer wrapper and the callbacks, this module gives the
process API, the collectives on values (numpy results; ``allreduce`` and
``reducescatter`` with ``horovod.keras``'s arguments), the object
collectives, the timeline, Horovod's build queries and exceptions, so a
script needs no other import.
The callbacks are also under ``hvd.callbacks``, as in ``horovod.keras``.

Example::

    import keras, numpy as np
    import keras_callbacks as hvd

    hvd.init()
    x, y = hvd.shard((np.random.rand(64, 4), np.random.rand(64, 1)))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), loss="mse")
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[
        hvd.BroadcastGlobalVariablesCallback(0),
        hvd.MetricAverageCallback(),
        hvd.LearningRateWarmupCallback(0.01 * hvd.size(), warmup_epochs=1),
    ])

Run it with ``ringrun -np 2 python script.py``.
"""

from ring_strategy._surface import (  # noqa: F401  (the names every front end shares; named, for griffe)
    add_process_set,
    BadArgumentError,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    gpu_available,
    init,
    is_initialized,
    local_rank,
    local_size,
    MismatchError,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    PeerFailureError,
    ProcessSet,
    rank,
    remove_process_set,
    RingError,
    RingTimeoutError,
    rocm_built,
    shutdown,
    ShutdownError,
    size,
    start_timeline,
    stop_timeline,
)
from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from ring_strategy.ops import (
    Average,
    Max,
    Min,
    Product,
    Sum,
    alltoall,
    barrier,
)

from keras_callbacks.collectives import (
    allgather,
    allgather_object,
    allreduce,
    broadcast,
    broadcast_object,
    reducescatter,
)

from keras_callbacks.compression import Compression
from keras_callbacks.optimizer import DistributedOptimizer, PartialDistributedOptimizer, load_model
from keras_callbacks import callbacks
from keras_callbacks.callbacks import (
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
from keras_callbacks.sharding import shard
from keras_callbacks import elastic

# Written out, not built from _surface.__all__, so that documentation tools
# (griffe) list every name; tests/test_surface.py checks it holds the surface.
__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "Average", "Sum", "Min", "Max", "Product",
    "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier",
    "broadcast_object", "allgather_object", "start_timeline", "stop_timeline",
    "RingError", "BadArgumentError", "MismatchError", "PeerFailureError", "RingTimeoutError", "ShutdownError",
    "HorovodInternalError", "HostsUpdatedInterrupt",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built",
    "ccl_built", "cuda_built", "rocm_built", "gpu_available",
    "Compression", "DistributedOptimizer", "PartialDistributedOptimizer", "load_model", "callbacks",
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
    "LearningRateScheduleCallback", "LearningRateWarmupCallback", "shard",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
]
