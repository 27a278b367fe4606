"""Gradient compression for the TensorFlow collectives, as in Horovod
(:mod:`ring_strategy.compression`).

Example::

    import ring_strategy.tensorflow as hvd
    avg = hvd.allreduce(grad, compression=hvd.Compression.fp16)
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from ring_strategy.compression import CastCompressor, Compressor, NoneCompressor, compression_namespace

__all__ = ["Compression", "Compressor", "NoneCompressor"]


class _TensorFlowCast(CastCompressor):
    @staticmethod
    def float_dtype(tensor: tf.Tensor) -> Optional[tf.DType]:
        return tensor.dtype if tensor.dtype.is_floating else None

    @staticmethod
    def cast(tensor: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        return tf.cast(tensor, dtype)


Compression = compression_namespace(_TensorFlowCast, tf.float16, tf.bfloat16)
