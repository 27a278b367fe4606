"""Gradient compression, as in Horovod: the parts every front end shares.

A compressor turns a tensor into what travels (``compress``) and back
(``decompress``). The 16-bit compressors halve the bytes a float32 gradient
puts on the wire; the reduction then runs in 16-bit precision. Each front end
(``ring_strategy.torch``, ``ring_strategy.tensorflow``, ``keras_callbacks``)
says how its tensors are cast and exposes ``Compression.none``, ``.fp16`` and
``.bf16`` built from these classes. Nothing here imports a framework.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Type

__all__ = ["CastCompressor", "Compressor", "NoneCompressor", "compression_namespace"]


class Compressor:
    """Interface of a compressor: two methods called on the class."""

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


class CastCompressor(Compressor):
    """Sends floating-point tensors as ``wire_dtype``; other tensors as they are.

    A front end subclasses it with its framework's :meth:`float_dtype` and
    :meth:`cast`, then once per wire dtype.
    """

    wire_dtype: Any = None

    @staticmethod
    def float_dtype(tensor: Any) -> Optional[Any]:
        """The tensor's dtype when it is a floating-point type, else None."""
        raise NotImplementedError

    @staticmethod
    def cast(tensor: Any, dtype: Any) -> Any:
        """The tensor as ``dtype``."""
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor: Any) -> Tuple[Any, Optional[Any]]:
        dtype = cls.float_dtype(tensor)
        if dtype is not None and dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor: Any, ctx: Optional[Any]) -> Any:
        return tensor if ctx is None else cls.cast(tensor, ctx)


def compression_namespace(cast: Type[CastCompressor], fp16: Any, bf16: Any) -> type:
    """The ``Compression`` class of a front end: ``none``, and ``fp16`` /
    ``bf16`` as subclasses of ``cast`` sending its framework's ``fp16`` /
    ``bf16`` dtypes."""
    fp16_compressor = type("FP16Compressor", (cast,), {
        "__doc__": "Sends floating-point tensors as float16 (IEEE half: 10-bit mantissa, max 65504).",
        "__module__": cast.__module__, "wire_dtype": fp16})
    bf16_compressor = type("BF16Compressor", (cast,), {
        "__doc__": "Sends floating-point tensors as bfloat16 (float32's range, 7-bit mantissa).",
        "__module__": cast.__module__, "wire_dtype": bf16})
    return type("Compression", (), {
        "__doc__": "The available compressors: ``none``, ``fp16`` and ``bf16``.",
        "__module__": cast.__module__,
        "none": NoneCompressor, "fp16": fp16_compressor, "bf16": bf16_compressor})
