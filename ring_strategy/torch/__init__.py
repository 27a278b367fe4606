"""Horovod-compatible PyTorch API: replace ``import horovod.torch as hvd`` with
``import ring_strategy.torch as hvd``.

Example::

    import torch
    import ring_strategy.torch as hvd

    hvd.init()
    total = hvd.allreduce(torch.ones(3), op=hvd.Sum)  # tensor([size, size, size])

Run it with ``ringrun -np 2 python script.py``.
"""

from ring_strategy._surface import *  # noqa: F401,F403  (the names every front end shares)
from ring_strategy.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from ring_strategy.torch import elastic
from ring_strategy.torch.compression import Compression
from ring_strategy.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from ring_strategy.torch.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from ring_strategy.torch.optimizer import DistributedOptimizer
from ring_strategy.torch.powersgd import PowerSGD
from ring_strategy.torch.sync_batch_norm import SyncBatchNorm
