"""Gradient compression for :class:`DistributedOptimizer`, as in Horovod.

A compressor turns a tensor into what travels (``compress``) and back
(``decompress``). ``fp16`` and ``bf16`` halve the bytes a float32 gradient
puts on the wire; the reduction then runs in 16-bit precision.

Example::

    import keras, keras_callbacks as hvd
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=hvd.Compression.bf16)
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from keras import ops


class Compressor:
    """Interface of a compressor: two static methods on backend tensors."""

    @staticmethod
    def compress(tensor: Any) -> Tuple[Any, Any]:
        """Returns the tensor to send and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        """Returns the received tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: Any) -> Tuple[Any, None]:
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: None) -> Any:
        return tensor


class _CastCompressor(Compressor):
    """Sends floating-point tensors as ``wire_dtype``; others as they are."""

    wire_dtype: str

    @classmethod
    def compress(cls, tensor: Any) -> Tuple[Any, Optional[str]]:
        dtype = ops.dtype(tensor) if hasattr(ops, "dtype") else str(tensor.dtype)
        if "float" in dtype and dtype != cls.wire_dtype:
            return ops.cast(tensor, cls.wire_dtype), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Optional[str]) -> Any:
        return tensor if ctx is None else ops.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (10-bit mantissa, max 65504)."""

    wire_dtype = "float16"


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16 (float32's range, 7-bit mantissa)."""

    wire_dtype = "bfloat16"


class Compression:
    """The available compressors: ``none``, ``fp16`` and ``bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
