"""Horovod's build queries (``hvd.nccl_built()``, ``hvd.mpi_enabled()``, ...),
truthful for this installation, for every front end.

ring is one native engine over shared memory and TCP, with a GPU path whose
libraries (the CUDA driver, NCCL) are loaded at run time: the GPU queries
answer for what this process found, not for how the wheel was compiled.
There is no MPI, Gloo, DDL, oneCCL or ROCm inside, so those answer False.
Scripts use them to choose a code path (``if hvd.nccl_built(): ...``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any, Dict, List

__all__ = [
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "gpu_available",
]  # and gpu_info(), ring's own (every front end exports the names above)


def nccl_wheel_paths() -> List[str]:
    """Where an installed nvidia-nccl wheel (``nvidia/nccl/lib``) holds libnccl.so.2."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec else []
    paths = [os.path.join(root, "nccl", "lib", "libnccl.so.2") for root in roots]
    return [p for p in paths if os.path.exists(p)]


@functools.lru_cache(maxsize=None)
def gpu_info() -> Dict[str, Any]:
    """What this process found of the CUDA driver and NCCL (loaded once, on the first call).

    Returns:
        A dict: ``cuda_loaded``, ``cuda_path``, ``cuda_error``, ``cuda_driver_version``,
        ``device_count``, ``nccl_loaded``, ``nccl_path``, ``nccl_source``, ``nccl_error``,
        ``nccl_version`` (NCCL's version code, 0 when none) and ``nccl_version_text``.
    """
    from ring_strategy import _native

    return dict(_native.gpu_info(nccl_wheel_paths()))


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


def nccl_built() -> int:
    """The version code of the NCCL this process loaded (e.g. 22703 for 2.27.3), or 0 when none."""
    return int(gpu_info()["nccl_version"])


def ddl_built() -> bool:
    """False."""
    return False


def ccl_built() -> bool:
    """False."""
    return False


def cuda_built() -> bool:
    """True when the CUDA driver loads in this process, so the GPU path can run on CUDA tensors."""
    return bool(gpu_info()["cuda_loaded"])


def gpu_available() -> bool:
    """True when the CUDA driver loads and sees at least one GPU."""
    info = gpu_info()
    return bool(info["cuda_loaded"]) and int(info["device_count"]) > 0


def rocm_built() -> bool:
    """False: there is no ROCm path."""
    return False
