"""Keras 3 data-parallel training on ring: ``import keras_callbacks as hvd``.

Works on the TensorFlow, JAX and torch Keras backends (choose one with
``KERAS_BACKEND`` before importing keras), inside the compiled train step.
Besides the optimizer wrapper and the callbacks, this module gives the
process API and the numpy collectives, so a script needs no other import.
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

from ring_strategy.basics import (
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
from ring_strategy.exceptions import (
    BadArgumentError,
    MismatchError,
    PeerFailureError,
    RingError,
    RingTimeoutError,
    ShutdownError,
)
from ring_strategy.ops import (
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    reducescatter,
)
from ring_strategy.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

from keras_callbacks.compression import Compression
from keras_callbacks.optimizer import DistributedOptimizer, load_model
from keras_callbacks import callbacks
from keras_callbacks.callbacks import (
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
from keras_callbacks.sharding import shard
from keras_callbacks import elastic

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "Average", "Sum", "Min", "Max", "Product",
    "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier",
    "RingError", "BadArgumentError", "MismatchError", "PeerFailureError", "RingTimeoutError", "ShutdownError",
    "Compression", "DistributedOptimizer", "load_model", "callbacks",
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
    "LearningRateScheduleCallback", "LearningRateWarmupCallback", "shard",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
]
