"""Horovod-compatible collectives on torch tensors, under the names of
``horovod.torch.mpi_ops`` (Horovod 0.28).

Every ``*_async`` function returns an integer handle at once; ``synchronize``
waits for it and returns the result, ``poll`` tells whether it is done. The
operations live in :mod:`ring_strategy.torch._async_ops` (non-differentiable
core) and :mod:`ring_strategy.torch.autograd` (differentiable forms); this
module gathers them with the process API and the build queries.

Tensors cross into the engine through DLPack: a contiguous CPU tensor is read
(and, for the in-place ``*_`` forms, written) where it lies, without a copy.
CUDA tensors go to the engine's GPU path (docs/gpu.md).
"""

from __future__ import annotations

from ring_strategy._core.rules import (  # noqa: F401  (re-exported)
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    handle_average_backwards_compatibility,
)
from ring_strategy.basics import (  # noqa: F401  (re-exported, as Horovod's mpi_ops does)
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
from ring_strategy.build_queries import (  # noqa: F401  (re-exported)
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gpu_available,
    gloo_enabled,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from ring_strategy.exceptions import BadArgumentError, RingError  # noqa: F401  (re-exported)
from ring_strategy.torch._async_ops import (  # noqa: F401  (re-exported)
    allgather_async,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
    barrier,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather_async,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from ring_strategy.torch.autograd import (  # noqa: F401  (re-exported)
    allgather,
    allreduce,
    alltoall,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from ring_strategy.torch.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async", "poll", "synchronize", "join", "barrier",
    "handle_average_backwards_compatibility",
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "gpu_available",
]
