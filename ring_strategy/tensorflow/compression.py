"""Gradient compression for the TensorFlow collectives, as in Horovod.

A compressor turns a tensor into what travels (``compress``) and back
(``decompress``). The 16-bit compressors halve the bytes a float32 gradient
puts on the wire; the reduction then runs in 16-bit precision.

Example::

    import ring_strategy.tensorflow as hvd
    avg = hvd.allreduce(grad, compression=hvd.Compression.fp16)
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import tensorflow as tf


class Compressor:
    """Interface of a compressor: two static methods."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        """Returns the tensor to send and the context ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Returns the received tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, None]:
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: None) -> tf.Tensor:
        return tensor


class _CastCompressor(Compressor):
    """Sends floating-point tensors as ``wire_dtype``; other tensors as they are."""

    wire_dtype: tf.DType

    @classmethod
    def compress(cls, tensor: tf.Tensor) -> Tuple[tf.Tensor, Optional[tf.DType]]:
        if tensor.dtype.is_floating and tensor.dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Optional[tf.DType]) -> tf.Tensor:
        return tensor if ctx is None else tf.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (10-bit mantissa, max 65504)."""

    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16 (float32's range, 7-bit mantissa)."""

    wire_dtype = tf.bfloat16


class Compression:
    """The available compressors: ``none``, ``fp16`` and ``bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
