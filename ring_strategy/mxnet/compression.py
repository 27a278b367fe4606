"""Gradient compression for the MXNet front end, as in Horovod
(:mod:`ring_strategy.compression`).

``Compression.fp16`` sends float32 and float64 gradients as float16.
``Compression.bf16`` is listed for the same names on every front end, but
MXNet 1.9.1 cannot hand bfloat16 NDArrays to the host, so using it raises
``BadArgumentError``.

Example::

    import ring_strategy.mxnet as hvd
    trainer = hvd.DistributedTrainer(params, "sgd", compression=hvd.Compression.fp16)
"""

from __future__ import annotations

from typing import Any, Optional

import mxnet as mx
import numpy as np

from ring_strategy.compression import CastCompressor, Compressor, NoneCompressor, compression_namespace
from ring_strategy.exceptions import BadArgumentError

__all__ = ["Compression", "Compressor", "NoneCompressor"]

_BFLOAT16 = "bfloat16"


class _MXNetCast(CastCompressor):
    @staticmethod
    def float_dtype(tensor: mx.nd.NDArray) -> Optional[Any]:
        return tensor.dtype if np.issubdtype(tensor.dtype, np.floating) else None

    @staticmethod
    def cast(tensor: mx.nd.NDArray, dtype: Any) -> mx.nd.NDArray:
        if dtype == _BFLOAT16:
            raise BadArgumentError("Compression.bf16 is not available for MXNet: use Compression.fp16")
        return tensor.astype(dtype)


Compression = compression_namespace(_MXNetCast, np.float16, _BFLOAT16)
