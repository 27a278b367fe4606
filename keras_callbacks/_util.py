"""Helpers shared by the callbacks: validation and fused variable transfers."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import keras

from ring_strategy import ops as ring_ops
from ring_strategy._fused import by_dtype
from ring_strategy.exceptions import BadArgumentError


def check_float(name: str, value: Any, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadArgumentError(f"{name} should be a float. Got: {value!r}")
    return float(value)


def check_int(name: str, value: Any, minimum: int = 0, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise BadArgumentError(f"{name} should be an integer >= {minimum}. Got: {value!r}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadArgumentError(f"{name} should be a bool. Got: {value!r}")
    return value


def broadcast_variables(variables: Sequence[Any], root_rank: int, label: str) -> None:
    """Overwrites every Keras variable with ``root_rank``'s value: one
    broadcast per dtype, variables in the given (rank-independent) order."""
    values = [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in variables]
    groups = by_dtype([a.dtype.name for a in values])
    handles = []
    for dtype, idx in groups.items():
        flat = np.concatenate([values[i].reshape(-1) for i in idx]) if idx else np.empty(0)
        handles.append((idx, ring_ops.broadcast_async(flat, root_rank, name=f"{label}.{dtype}")))
    for idx, h in handles:
        flat = ring_ops.synchronize(h)
        offset = 0
        for i in idx:
            n = values[i].size
            variables[i].assign(flat[offset:offset + n].reshape(values[i].shape))
            offset += n


def sync_jax_state(model: Any) -> None:
    """On JAX, writes the state the trainer holds back into the variables and
    makes the trainer read it again before its next step, so that a change to
    a variable made now takes effect. A no-op on the other backends."""
    if keras.backend.backend() != "jax" or model is None:
        return
    if getattr(model, "_jax_state", None) is not None and not getattr(model, "_jax_state_synced", True):
        model.jax_state_sync()
        model._jax_state_synced = True
