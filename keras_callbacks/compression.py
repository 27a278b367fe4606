"""Gradient compression for :class:`DistributedOptimizer`, as in Horovod
(:mod:`ring_strategy.compression`), on any Keras backend's tensors.

Example::

    import keras, keras_callbacks as hvd
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=hvd.Compression.bf16)
"""

from __future__ import annotations

from typing import Any, Optional

from keras import ops

from ring_strategy.compression import CastCompressor, Compressor, NoneCompressor, compression_namespace

__all__ = ["Compression", "Compressor", "NoneCompressor"]


class _KerasCast(CastCompressor):
    @staticmethod
    def float_dtype(tensor: Any) -> Optional[str]:
        dtype = ops.dtype(tensor) if hasattr(ops, "dtype") else str(tensor.dtype)
        return dtype if "float" in dtype else None

    @staticmethod
    def cast(tensor: Any, dtype: str) -> Any:
        return ops.cast(tensor, dtype)


Compression = compression_namespace(_KerasCast, "float16", "bfloat16")
