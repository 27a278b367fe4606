"""Gradient compression for the torch collectives, as in Horovod
(:mod:`ring_strategy.compression`). The cast is differentiable, so compressed
collectives keep their gradients.

Example::

    import ring_strategy.torch as hvd
    avg = hvd.allreduce(grad, compression=hvd.Compression.bf16)
"""

from __future__ import annotations

from typing import Optional

import torch

from ring_strategy.compression import CastCompressor, Compressor, NoneCompressor, compression_namespace

__all__ = ["Compression", "Compressor", "NoneCompressor"]


class _TorchCast(CastCompressor):
    @staticmethod
    def float_dtype(tensor: torch.Tensor) -> Optional[torch.dtype]:
        return tensor.dtype if tensor.dtype.is_floating_point else None

    @staticmethod
    def cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return tensor.to(dtype)


Compression = compression_namespace(_TorchCast, torch.float16, torch.bfloat16)
