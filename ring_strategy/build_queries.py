"""Horovod's build queries (``hvd.nccl_built()``, ``hvd.mpi_enabled()``, ...),
truthful for this build, for every front end.

ring is one native engine over shared memory and TCP: no MPI, Gloo, NCCL,
DDL, oneCCL, CUDA or ROCm inside, so every query answers False. Scripts use
them to choose a code path (``if hvd.nccl_built(): ...``); False sends them
down the CPU path, which is the one ring runs.
"""

from __future__ import annotations

__all__ = [
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built",
]


def mpi_built() -> bool:
    """False: ring does not use MPI (it can still be launched by mpirun)."""
    return False


def mpi_enabled() -> bool:
    """False: collectives never run over MPI."""
    return False


def mpi_threads_supported() -> bool:
    """False: there is no MPI."""
    return False


def gloo_built() -> bool:
    """False: ring has its own engine instead of Gloo."""
    return False


def gloo_enabled() -> bool:
    """False: collectives never run over Gloo."""
    return False


def nccl_built() -> bool:
    """False: this build has no NCCL path."""
    return False


def ddl_built() -> bool:
    """False."""
    return False


def ccl_built() -> bool:
    """False."""
    return False


def cuda_built() -> bool:
    """False: this build handles CPU tensors only."""
    return False


def rocm_built() -> bool:
    """False: this build handles CPU tensors only."""
    return False
