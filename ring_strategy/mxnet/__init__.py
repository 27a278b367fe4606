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

from ring_strategy._surface import *  # noqa: F401,F403  (the names every front end shares)
from ring_strategy.mxnet.compression import Compression  # noqa: F401
from ring_strategy.mxnet.functions import allgather_object, broadcast_object, broadcast_parameters  # noqa: F401
from ring_strategy.mxnet.mpi_ops import (  # noqa: F401
    allgather,
    allreduce,
    allreduce_,
    alltoall,
    broadcast,
    broadcast_,
    grouped_allreduce,
    grouped_allreduce_,
)
from ring_strategy.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
