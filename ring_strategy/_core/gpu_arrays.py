"""Layer 1 of the core, beside the rules: arrays on a CUDA GPU for the
collectives on arrays (:mod:`ring_strategy._core.arrays`): cupy
arrays, and any array whose ``__dlpack_device__`` says CUDA (taken as a cupy
view, zero-copy). Their results are cupy arrays on the same GPU.

The engine reads an input after the work queued so far on cupy's current
stream, and a result is complete (readable on any stream) once its
operation is. torch tensors go through :mod:`ring_strategy.torch` instead.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ring_strategy.exceptions import BadArgumentError

__all__ = ["is_gpu", "as_gpu", "empty_like", "empty", "stream_of", "result"]

_CUDA_DEVICE_TYPES = (2, 13)  # DLPack's kDLCUDA and kDLCUDAManaged


def is_gpu(x: Any) -> bool:
    """Whether ``x`` (not a numpy array) lives on a CUDA GPU, by its DLPack device."""
    device = getattr(x, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return int(device()[0]) in _CUDA_DEVICE_TYPES
    except (TypeError, ValueError, IndexError, BufferError, RuntimeError):
        return False


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise BadArgumentError(
            "an array on a CUDA GPU needs cupy in ring_strategy's core API (pip install 'ring-strategy[gpu]', "
            "or cupy-cuda13x on CUDA 13); torch CUDA tensors go through ring_strategy.torch"
        ) from None
    return cupy


def as_gpu(x: Any) -> Any:
    """``x`` as a C-contiguous cupy array (a copy only when ``x`` is strided)."""
    cp = _cupy()
    arr = x if isinstance(x, cp.ndarray) else cp.from_dlpack(x)
    return arr if arr.flags.c_contiguous else cp.ascontiguousarray(arr)


def empty_like(arr: Any) -> Any:
    return _cupy().empty_like(arr)


def empty(shape: Sequence[int], like: Any) -> Any:
    """A new cupy array of ``shape`` with ``like``'s dtype, on its GPU."""
    cp = _cupy()
    with cp.cuda.Device(like.device.id):
        return cp.empty(tuple(shape), dtype=like.dtype)


def stream_of(arr: Any) -> int:
    """The stream (a CUstream as an integer) cupy queues work on now."""
    return int(_cupy().cuda.get_current_stream().ptr)


def result(data: Any, like: Any, shape: Sequence[int]) -> Any:
    """An engine-allocated result as a cupy array of ``like``'s dtype: GPU
    memory (the NCCL path) taken as is, host memory (host-staged) copied to
    ``like``'s GPU."""
    cp = _cupy()
    if data is None:
        return empty(shape, like)
    if isinstance(data, np.ndarray):
        with cp.cuda.Device(like.device.id):
            return cp.asarray(data).view(like.dtype).reshape(tuple(shape))
    return cp.from_dlpack(data).view(like.dtype).reshape(tuple(shape))
