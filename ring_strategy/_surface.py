"""The Horovod surface every front end shares: the names that
``ring_strategy.torch``, ``ring_strategy.tensorflow``,
``ring_strategy.mxnet`` and ``ring_strategy.keras`` (``keras_callbacks``)
all export, as the same objects, because none of them depends on the
framework. Each front end takes them with ``from ring_strategy._surface
import *`` and adds only its own names (the collectives on its tensors, its
optimizers, ...). A name added here reaches every front end at once.

``tests/test_surface.py`` checks each front end against this list and
against the tables of docs/support.md, which name what each of Horovod's
modules offers.
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
from ring_strategy.build_queries import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    gpu_available,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from ring_strategy.exceptions import (
    BadArgumentError,
    MismatchError,
    PeerFailureError,
    RingError,
    RingTimeoutError,
    ShutdownError,
)
from ring_strategy.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from ring_strategy.timeline import start_timeline, stop_timeline

#: The process API, as Horovod's ``basics``.
PROCESS = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
           "cross_size"]
#: ring's errors (docs/errors.md).
ERRORS = ["RingError", "BadArgumentError", "MismatchError", "PeerFailureError", "RingTimeoutError", "ShutdownError"]
#: Process sets (docs/support.md#process-sets).
PROCESS_SETS = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]
#: The timeline started from the script.
TIMELINE = ["start_timeline", "stop_timeline"]
#: Horovod's build queries.
BUILD_QUERIES = ["mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
                 "ddl_built", "ccl_built", "cuda_built", "rocm_built", "gpu_available"]

__all__ = PROCESS + ERRORS + PROCESS_SETS + TIMELINE + BUILD_QUERIES
