"""Host collectives on the tensors of the active Keras backend.

Every Keras backend runs its train step in its own way: TensorFlow in a
``tf.function`` graph, JAX under ``jax.jit``, torch eagerly. :func:`host_call`
runs a numpy function on a list of backend tensors from wherever the step
happens to be traced or executed, exactly once per execution and in program
order, and returns backend tensors of the same shapes and dtypes, through
ring's host-call bridge (:mod:`ring_strategy._host_call`).
"""

from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

import keras

from ring_strategy._host_call import CALLS


def backend() -> str:
    return keras.backend.backend()


def host_call(fn: Callable[[List[np.ndarray]], List[np.ndarray]], tensors: Sequence, label: str = "ring") -> list:
    """``fn`` applied on the host to ``tensors`` (a list of same-shaped outputs).

    Args:
        fn: takes and returns a list of numpy arrays, the outputs with the
            inputs' shapes and dtypes.
        tensors: backend tensors (traced or concrete).
        label: names the TensorFlow op.

    Raises:
        RuntimeError: on a backend ring does not support, or in a TensorFlow
            step compiled with ``jit_compile=True``.
    """
    name = backend()
    call = CALLS.get(name)
    if call is None:
        raise RuntimeError(f"ring supports the tensorflow, jax and torch Keras backends. Got: {name!r}")
    return call(fn, list(tensors), label=label)
