"""Horovod-compatible MXNet API: replace ``import horovod.mxnet as hvd`` with
``import ring_strategy.mxnet as hvd``.

Needs Apache MXNet 1.9.1 (its last release) with numpy older than 1.24, in
an environment of its own; see docs/mxnet.md.

Example::

    import mxnet as mx
    import ring_strategy.mxnet as hvd

    hvd.init()
    net = mx.gluon.nn.Dense(1)
    net.initialize()
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})

Run it with ``ringrun -np 2 python script.py``.
"""

from ring_strategy.exceptions import (  # noqa: F401
    BadArgumentError,
    MismatchError,
    PeerFailureError,
    RingError,
    RingTimeoutError,
    ShutdownError,
)
from ring_strategy.mxnet.compression import Compression  # noqa: F401
from ring_strategy.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from ring_strategy.mxnet.mpi_ops import (  # noqa: F401
    ProcessSet,
    add_process_set,
    allgather,
    allreduce,
    allreduce_,
    alltoall,
    broadcast,
    broadcast_,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    grouped_allreduce,
    grouped_allreduce_,
    gpu_available,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from ring_strategy.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
