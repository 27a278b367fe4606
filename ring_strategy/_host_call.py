"""The host-call bridge: a numpy function run on a framework's tensors from
wherever the framework traces or executes them, exactly once per execution
and in program order, giving back that framework's tensors. The TensorFlow
front end and every Keras backend reach the engine through it.

- TensorFlow: called at once in eager mode; in a graph, a stateful
  ``tf.numpy_function`` (never pruned or merged, run in program order by
  ``tf.function``'s automatic control dependencies). XLA cannot compile a
  Python callback, so under ``jit_compile=True`` it raises a clear error.
- JAX: ``jax.experimental.io_callback(ordered=True)``: an ordered effect, so
  the callback runs once per step, after the ones before it, even under jit.
- torch: the CPU tensors are read as numpy arrays; the call is excluded from
  ``torch.compile`` (a graph break) so that it runs eagerly.
- numpy: called at once.

Each framework is imported on first use, never by importing this module:
Keras on the JAX or torch backend does not load TensorFlow.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np

# Numpy arrays in, numpy arrays out (one per output, of the declared shapes and dtypes).
HostFn = Callable[[List[np.ndarray]], List[np.ndarray]]

XLA_ERROR = (
    "ring's collectives cannot run inside XLA-compiled TensorFlow code (jit_compile=True): the tensors leave "
    "the graph to reach the engine. Use jit_compile=False (with Keras: model.compile(..., jit_compile=False))."
)


# ---------------------------------------------------------------- TensorFlow
def in_xla_context() -> bool:
    """True while building a TensorFlow graph that XLA will compile (``jit_compile=True``)."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        return True
    while graph is not None:
        if getattr(graph, "_xla_compile", False):
            return True
        graph = getattr(graph, "outer_graph", None)
    return False


def tensorflow_call(fn: HostFn, inputs: Sequence[Any], out_dtypes: Optional[Sequence[Any]] = None,
                    out_shapes: Optional[Sequence[Any]] = None, label: str = "ring") -> List[Any]:
    """``fn`` on TensorFlow tensors.

    Args:
        fn: the host function.
        inputs: tf tensors (eager or symbolic).
        out_dtypes: the outputs' tf dtypes; the inputs' when None.
        out_shapes: the outputs' static shapes (dimensions may be None); the
            inputs' when None.
        label: names the graph op.

    Raises:
        RuntimeError: inside XLA-compiled code.
    """
    import tensorflow as tf

    inputs = list(inputs)
    out_dtypes = [t.dtype for t in inputs] if out_dtypes is None else list(out_dtypes)
    out_shapes = [t.shape for t in inputs] if out_shapes is None else list(out_shapes)
    if tf.executing_eagerly():
        outs = fn([t.numpy() for t in inputs])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, out_dtypes)]
    if in_xla_context():
        raise RuntimeError(XLA_ERROR)
    outs = tf.numpy_function(lambda *arrays: list(fn(list(arrays))), inputs, out_dtypes, stateful=True, name=label)
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for o, s in zip(outs, out_shapes):
        o.set_shape(s)
    return list(outs)


# ---------------------------------------------------------------- JAX
def jax_call(fn: HostFn, inputs: Sequence[Any], label: str = "ring") -> List[Any]:
    """``fn`` on JAX arrays (traced or concrete); outputs shaped like the inputs."""
    import jax
    from jax.experimental import io_callback

    shapes = [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in inputs]
    return list(io_callback(lambda *arrays: fn([np.asarray(a) for a in arrays]), shapes, *inputs, ordered=True))


# ---------------------------------------------------------------- torch
_TORCH_CALL: Optional[Callable[[HostFn, List[Any]], List[Any]]] = None


def torch_call(fn: HostFn, inputs: Sequence[Any], label: str = "ring") -> List[Any]:
    """``fn`` on torch tensors; outputs shaped like the inputs, on their devices."""
    global _TORCH_CALL
    if _TORCH_CALL is None:
        import torch

        # Excluded from torch.compile: Dynamo would otherwise trace the numpy
        # code instead of running it.
        _TORCH_CALL = torch.compiler.disable(_torch_call)
    return _TORCH_CALL(fn, list(inputs))


def _torch_call(fn: HostFn, tensors: List[Any]) -> List[Any]:
    import torch

    arrays = [_torch_bf16_to_numpy(t) if t.dtype == torch.bfloat16 else t.detach().cpu().numpy() for t in tensors]
    return [_numpy_to_torch(o, t) for o, t in zip(fn(arrays), tensors)]


def _torch_bf16_to_numpy(t: Any) -> np.ndarray:
    import ml_dtypes
    import torch

    return t.detach().cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _numpy_to_torch(a: np.ndarray, like: Any) -> Any:
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(like.device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


# ---------------------------------------------------------------- numpy
def numpy_call(fn: HostFn, inputs: Sequence[Any], label: str = "ring") -> List[Any]:
    """``fn`` on arrays (anything ``np.asarray`` reads)."""
    return fn([np.asarray(t) for t in inputs])


# The bridge of each framework whose outputs are shaped like its inputs, by name.
CALLS = {"tensorflow": tensorflow_call, "jax": jax_call, "torch": torch_call, "numpy": numpy_call}
