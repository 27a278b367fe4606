"""Horovod-compatible TensorFlow API: replace ``import horovod.tensorflow as hvd``
with ``import ring_strategy.tensorflow as hvd``.

Collectives work on tf tensors eagerly and inside ``tf.function`` (not under
XLA, ``jit_compile=True``). For Keras' ``model.fit`` use ``keras_callbacks``.
TensorFlow 1-style (graph-mode, ``tf.compat.v1``) scripts have
``DistributedOptimizer`` for ``tf.compat.v1.train`` optimizers,
``broadcast_global_variables`` and ``BroadcastGlobalVariablesHook``.

Example::

    import tensorflow as tf
    import ring_strategy.tensorflow as hvd

    hvd.init()
    total = hvd.allreduce(tf.ones(3), op=hvd.Sum)  # [size, size, size]

Run it with ``ringrun -np 2 python script.py``.
"""

from ring_strategy._surface import *  # noqa: F401,F403  (the names every front end shares)
from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from ring_strategy.tensorflow.compression import Compression
from ring_strategy.tensorflow.functions import (
    allgather_object,
    broadcast_,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from ring_strategy.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from ring_strategy.tensorflow.mpi_ops import (
    Adasum,
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
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    join,
    local_rank_op,
    local_size_op,
    rank_op,
    reducescatter,
    process_set_included_op,
    size_op,
)
from ring_strategy.tensorflow.optimizer import DistributedOptimizer
from ring_strategy.tensorflow.session_hooks import BroadcastGlobalVariablesHook
from ring_strategy.tensorflow import elastic
from ring_strategy.tensorflow.sync_batch_norm import SyncBatchNormalization
