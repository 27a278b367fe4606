"""ring's collectives on JAX arrays, inside ``jax.jit`` or outside it,
through the XLA FFI handlers compiled into the extension
(native/frameworks/xla/collective_ffi.cc).

Each call is one ``jax.ffi.ffi_call`` with a side effect (never dropped as
dead code). The handlers are asynchronous: the engine fulfils their futures,
so no XLA thread waits and independent collectives may run in any order;
the engine pairs them across ranks by name. Names are generated when a
function is traced (counted per label, in call order, the same on every
rank) and reused at every run of the compiled function.

CPU arrays, and CUDA arrays where JAX has a CUDA backend: the CUDA handler
hands the engine XLA's stream, as torch's tensors hand it theirs (not yet
run on a GPU: tests/gpu/device_check.sh). Every collective of the core API
is here, barrier and join on the cpu platform only; under jit, shapes are
static (see :func:`allgather` and :func:`alltoall`). Keras'
``DistributedOptimizer`` on the JAX backend reduces its gradients here
(:func:`native_group_allreduce`); where the handlers are missing
(:mod:`ring_strategy._native_ops`) it falls back to host calls.

Example::

    import jax, jax.numpy as jnp, ring_strategy as rs
    from ring_strategy import jax_ops
    rs.init()
    step = jax.jit(lambda g: jax_ops.allreduce(g, name="grad"))
    print(step(jnp.ones(4)))
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ring_strategy import _native, _native_ops
from ring_strategy._core.handles import auto_name, group_names
from ring_strategy._core.rules import (Average, alltoall_splits, check_op, check_root, reducescatter_rows,
                                  require_rows)
from ring_strategy.process_sets import ProcessSet, global_process_set, place_of

__all__ = ["allreduce", "grouped_allreduce", "broadcast", "allgather", "alltoall", "reducescatter", "barrier",
           "join", "available"]
TARGET = "ring_collective"
def available() -> bool:
    """True when the FFI handlers are built and registered."""
    return _native_ops.native("jax") is not None


def _supported() -> bool:
    """True when the handlers run where JAX computes: the host handler on
    the cpu platform, the CUDA one (XLA's stream handed to the engine's
    NCCL path) on a CUDA GPU (:func:`ring_strategy._native_ops.jax_platforms`)."""
    import jax

    return jax.default_backend() in _native_ops.jax_platforms()


# The last collective's output in the trace being built: (trace, output).
_last: Tuple[Any, Any] = (None, None)


def _current_trace() -> Any:
    """The trace JAX is building (None when it cannot tell: no chaining)."""
    try:
        from jax._src import core
    except ImportError:  # pragma: no cover - JAX moved it
        return None
    return getattr(getattr(core, "trace_ctx", None), "trace", None)


def _call(op: int, xs: Sequence[Any], names: Sequence[str], out_types: Sequence[Any], reduce_op: int = 0,
          prescale: float = 1.0, postscale: float = 1.0, root: int = 0, process_set: int = 0) -> List[Any]:
    """One FFI call; inside a trace it also takes the previous collective's
    output, so XLA runs the trace's collectives in program order on every
    rank (see native/frameworks/xla/collective_ffi.cc)."""
    global _last
    import jax

    if _native_ops.native("jax") is None:
        raise RuntimeError(f"ring's JAX collectives are unavailable: {_native_ops.describe('jax')}")
    if not _supported():
        raise RuntimeError(f"ring's JAX collectives have no handler for the platform JAX computes on "
                           f"({jax.default_backend()}; they run on {sorted(_native_ops.jax_platforms())}); "
                           f"keras_callbacks' optimizer falls back to host calls there")
    traced = any(isinstance(x, jax.core.Tracer) for x in xs)
    trace = _current_trace() if traced else None
    after = [_last[1]] if trace is not None and _last[0] is trace else []
    call = jax.ffi.ffi_call(TARGET, list(out_types), has_side_effect=True)
    outs = list(call(*xs, *after, op=np.int64(op), names="\n".join(names), reduce_op=np.int64(reduce_op),
                     prescale=np.float64(prescale), postscale=np.float64(postscale), root=np.int64(root),
                     process_set=np.int64(process_set)))
    _last = (trace, outs[0]) if trace is not None else (None, None)
    return outs


def _like(x: Any) -> Any:
    import jax

    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def grouped_allreduce(xs: Sequence[Any], name: Optional[str] = None, op: int = Average,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[Any]:
    """Every array of ``xs`` reduced over the set's ranks, queued as one
    group (the engine fuses them). Arguments as for :func:`allreduce`."""
    import jax.numpy as jnp

    xs = [jnp.asarray(x) for x in xs]
    if not xs:
        return []
    place = place_of(process_set)
    names = group_names(auto_name("jax.grouped_allreduce", name, place.id), len(xs), True)
    return _call(_native.OP_ALLREDUCE, xs, names, [_like(x) for x in xs], check_op(op), prescale_factor,
                 postscale_factor, process_set=place.id)


def allreduce(x: Any, name: Optional[str] = None, op: int = Average, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> Any:
    """``x`` reduced over the set's ranks (Average by default).

    Args:
        x: an array of the same shape and dtype on every rank.
        name: the engine's name, the same on every rank (generated when traced if omitted).
        op: Average, Sum, Min, Max, Product or Adasum.
        prescale_factor, postscale_factor: multiply the input before and the result after.
        process_set: the ranks taking part (default: every rank).
    """
    import jax.numpy as jnp

    x = jnp.asarray(x)
    place = place_of(process_set)
    nm = auto_name("jax.allreduce", name, place.id)
    return _call(_native.OP_ALLREDUCE, [x], [nm], [_like(x)], check_op(op), prescale_factor, postscale_factor,
                 process_set=place.id)[0]


def broadcast(x: Any, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> Any:
    """``root_rank``'s ``x`` on every rank of the set (same shape and dtype everywhere)."""
    import jax.numpy as jnp

    x = jnp.asarray(x)
    place = place_of(process_set)
    nm = auto_name("jax.broadcast", name, place.id)
    return _call(_native.OP_BROADCAST, [x], [nm], [_like(x)], root=check_root(root_rank), process_set=place.id)[0]


def allgather(x: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> Any:
    """Every rank's ``x`` concatenated along the first dimension, in rank
    order. Under jit shapes are static, so every rank must give the same
    shape (a scalar counts as one row); otherwise the call fails on every rank."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    place = place_of(process_set)
    nm = auto_name("jax.allgather", name, place.id)
    out = jax.ShapeDtypeStruct((x.shape[0] * place.size,) + tuple(x.shape[1:]), x.dtype)
    return _call(_native.OP_ALLGATHER, [x], [nm], [out], process_set=place.id)[0]


def alltoall(x: Any, name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> Any:
    """Block i of ``x``'s rows goes to the set's i-th rank; returns the blocks
    received, in rank order. Under jit shapes are static, so the rows are
    split evenly (they must divide by the set's size, and every rank gives
    the same shape); uneven splits are ring_strategy.alltoall's, outside jit."""
    import jax.numpy as jnp

    x = jnp.asarray(x)
    require_rows("alltoall", x.ndim, "array")
    place = place_of(process_set)
    alltoall_splits(None, x.shape[0], place.size)
    nm = auto_name("jax.alltoall", name, place.id)
    return _call(_native.OP_ALLTOALL, [x], [nm], [_like(x)], process_set=place.id)[0]


def reducescatter(x: Any, op: int = Average, name: Optional[str] = None,
                  process_set: ProcessSet = global_process_set) -> Any:
    """``x`` reduced over the set's ranks (Average or Sum), this rank's block
    of rows returned: lower ranks get one extra row when the rows do not
    divide by the set's size."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(x)
    require_rows("reducescatter", x.ndim, "array")
    place = place_of(process_set)
    nm = auto_name("jax.reducescatter", name, place.id)
    rows = reducescatter_rows(x.shape[0], place.size, place.rank)
    out = jax.ShapeDtypeStruct((rows,) + tuple(x.shape[1:]), x.dtype)
    return _call(_native.OP_REDUCESCATTER, [x], [nm], [out], check_op(op), process_set=place.id)[0]


def barrier(process_set: ProcessSet = global_process_set, name: Optional[str] = None) -> Any:
    """Waits for every rank of the set. Returns a token (a uint8 array of one
    element): inside jit, compute on it to order later work after the barrier."""
    import jax
    import jax.numpy as jnp

    place = place_of(process_set)
    nm = auto_name("jax.barrier", name, place.id)
    token = jnp.zeros((1,), jnp.uint8)
    return _call(_native.OP_BARRIER, [token], [nm], [jax.ShapeDtypeStruct((1,), jnp.uint8)],
                 process_set=place.id)[0]


def join() -> Any:
    """Horovod's join (:func:`ring_strategy.join`) as a JAX call: this rank
    has no more data; returns the last rank to join, as an int32 scalar."""
    import jax
    import jax.numpy as jnp

    token = jnp.zeros((1,), jnp.uint8)
    return _call(_native.OP_JOIN, [token], ["join"], [jax.ShapeDtypeStruct((), jnp.int32)])[0]


def native_group_allreduce(tensors: Sequence[Any], names: Sequence[str], op: int, prescale: float,
                           postscale: float, process_set: Any) -> Optional[List[Any]]:
    """The arrays reduced as one group under ``names``, or None without the
    handlers (:meth:`ring_strategy._fused.Flattener.native_group`)."""
    if not available() or not _supported():
        return None
    place = place_of(process_set)
    return _call(_native.OP_ALLREDUCE, list(tensors), list(names), [_like(t) for t in tensors], op, prescale,
                 postscale, process_set=place.id)
