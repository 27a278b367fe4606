"""Gradient compression for the torch collectives, as in Horovod.

A compressor turns a tensor into what travels (``compress``) and back
(``decompress``). The 16-bit compressors halve the bytes a float32 gradient
puts on the wire; the reduction then runs in 16-bit precision.

Example::

    import ring_strategy.torch as hvd
    avg = hvd.allreduce(grad, compression=hvd.Compression.bf16)
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch


class Compressor:
    """Interface of a compressor: two static methods."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """Returns the tensor to send and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Returns the received tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: None) -> torch.Tensor:
        return tensor


class _CastCompressor(Compressor):
    """Sends floating-point tensors as ``wire_dtype``; other tensors as they are.

    The cast is differentiable, so compressed collectives keep their gradients.
    """

    wire_dtype: torch.dtype

    @classmethod
    def compress(cls, tensor: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.dtype]]:
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Optional[torch.dtype]) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (IEEE half: 10-bit mantissa, max 65504)."""

    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16 (float32's range, 7-bit mantissa)."""

    wire_dtype = torch.bfloat16


class Compression:
    """The available compressors: ``none``, ``fp16`` and ``bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
