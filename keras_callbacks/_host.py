"""Host collectives on the tensors of the active Keras backend.

Every Keras backend runs its train step in its own way: TensorFlow in a
``tf.function`` graph, JAX under ``jax.jit``, torch eagerly. This module hides
that: :func:`host_call` runs a numpy function on a list of backend tensors
from wherever the step happens to be traced or executed, exactly once per
execution and in program order, and returns backend tensors of the same
shapes and dtypes.

- TensorFlow: ``tf.numpy_function(stateful=True)`` (a stateful op is never
  pruned or merged). XLA cannot compile a Python callback, so a step compiled
  with ``jit_compile=True`` gets a clear error asking for ``jit_compile=False``.
- JAX: ``jax.experimental.io_callback(ordered=True)``: an ordered effect, so
  the callback runs once per step, after the ones before it, even under jit.
- torch: the tensors are plain CPU tensors; they are read as numpy arrays.
  Under ``torch.compile`` (``jit_compile=True``) the call is excluded from
  compilation (a graph break) and runs eagerly.
"""

from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

import keras

_JIT_ERROR = (
    "ring's DistributedOptimizer cannot run inside an XLA-compiled TensorFlow "
    "step: the gradients leave the graph to be allreduced. Compile the model "
    "with model.compile(..., jit_compile=False)."
)


def backend() -> str:
    return keras.backend.backend()


def _tf_in_xla() -> bool:
    from ring_strategy.tensorflow.mpi_ops import in_xla_context

    return in_xla_context()


def host_call(fn: Callable[[List[np.ndarray]], List[np.ndarray]], tensors: Sequence, label: str = "ring") -> list:
    """``fn`` applied on the host to ``tensors`` (a list of same-shaped outputs).

    Args:
        fn: takes and returns a list of numpy arrays, the outputs with the
            inputs' shapes and dtypes.
        tensors: backend tensors (traced or concrete).
        label: names the TensorFlow op.
    """
    name = backend()
    tensors = list(tensors)
    if name == "tensorflow":
        import tensorflow as tf

        if tf.executing_eagerly():
            return [tf.convert_to_tensor(a) for a in fn([t.numpy() for t in tensors])]
        if _tf_in_xla():
            raise RuntimeError(_JIT_ERROR)
        outs = tf.numpy_function(
            lambda *arrays: fn(list(arrays)), tensors, [t.dtype for t in tensors], stateful=True, name=label
        )
        for o, t in zip(outs, tensors):
            o.set_shape(t.shape)
        return list(outs)
    if name == "jax":
        import jax
        from jax.experimental import io_callback

        shapes = [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in tensors]
        return list(io_callback(lambda *arrays: fn([np.asarray(a) for a in arrays]), shapes, *tensors, ordered=True))
    if name == "torch":
        return _torch_host_call()(fn, tensors)
    if name == "numpy":
        return fn([np.asarray(t) for t in tensors])
    raise RuntimeError(f"ring supports the tensorflow, jax and torch Keras backends. Got: {name!r}")


_TORCH_HOST_CALL = None


def _torch_host_call():
    """The torch host call, excluded from torch.compile (``jit_compile=True``):
    Dynamo would otherwise trace the numpy code instead of running it."""
    global _TORCH_HOST_CALL
    if _TORCH_HOST_CALL is None:
        import torch

        @torch.compiler.disable
        def call(fn, tensors):
            arrays = [t.detach().cpu().numpy() if t.dtype != torch.bfloat16 else _torch_bf16_to_numpy(t)
                      for t in tensors]
            outs = fn(arrays)
            return [_numpy_to_torch(o, t) for o, t in zip(outs, tensors)]

        _TORCH_HOST_CALL = call
    return _TORCH_HOST_CALL


def _torch_bf16_to_numpy(t):
    import ml_dtypes
    import torch

    return t.detach().cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _numpy_to_torch(a: np.ndarray, like):
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(like.device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)
