"""ring's TensorFlow operations (native/frameworks/tensorflow): thin
wrappers that call the op library, and the ops' gradients, registered as
Horovod registers its own.

The kernels queue their tensors into the engine and finish from its
completion callback, so no TensorFlow thread waits: a TF1 session may run
any number of collectives in any order, and ``tf.function`` does not chain
them. Each op takes its engine names as a string input.

Inside XLA-compiled code (``jit_compile=True``), allreduce, grouped
allreduce, allgather (equal rows on every rank) and broadcast become one
``RingXlaCollective`` op each, which XLA lowers to ring's FFI custom call
(native/frameworks/tensorflow/xla_kernels.cc). The collectives of one
compiled function are chained in the order they were traced, as
:mod:`ring_strategy.jax_ops` chains JAX's; the other collectives raise a
clear error there. In eager mode a
ring error comes back as ring's exception class (the kernels prefix it to
the message: ``BadArgumentError: ...``); in a graph TensorFlow
raises its own error class with the same message.

:func:`library` is None when the library cannot be built or loaded; the
front end (:mod:`ring_strategy.tensorflow.mpi_ops`) then uses host calls.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from ring_strategy import _native, _native_ops, exceptions
from ring_strategy._core.handles import auto_name, group_names
from ring_strategy._host_call import XLA_ERROR, in_xla_context
from ring_strategy._core.rules import Adasum, Average, Sum

# RingQuery's codes (native/frameworks/engine_api.h: enum RingQuery).
QUERY_RANK, QUERY_SIZE, QUERY_LOCAL_RANK, QUERY_LOCAL_SIZE, QUERY_SET_SIZE, QUERY_SET_RANK = range(6)
# The ring error class the kernels start a message with (kernels.cc ring_status).
_ERROR = re.compile(r"\b(RingError|BadArgumentError|MismatchError|PeerFailureError|RingTimeoutError|ShutdownError): ")


def library() -> Any:
    """The loaded op library, or None (host calls)."""
    return _native_ops.native("tensorflow")


def op_name(label: str, name: Optional[str], process_set: int = 0) -> str:
    """``name``, or a generated one: counted per label and process set
    eagerly; in a graph, the graph's unique op name (``"tf.allreduce_1"``),
    which does not depend on how often a function was traced."""
    if name is not None or tf.executing_eagerly():
        return auto_name(label, name, process_set)
    scoped = label if process_set == 0 else f"{label}_set{process_set}"
    return "tf." + tf.compat.v1.get_default_graph().unique_name(scoped)


# The collectives RingXlaCollective runs inside XLA-compiled code.
_LOWERED = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter")


def _compiled() -> bool:
    """True while tracing code that XLA will compile."""
    return not tf.executing_eagerly() and in_xla_context()


def _ring_errors(fn: Callable) -> Callable:
    """Eagerly, a TensorFlow error the kernels marked as ring's becomes
    ring's exception, and on the main thread the call answers Python's
    signals while its kernel waits (``_native.answer_signals``: TensorFlow
    blocks that thread in an eager op's kernel). In a graph XLA will
    compile, a clear error for the collectives without an XLA lowering."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if fn.__name__ not in _LOWERED and _compiled():
            raise RuntimeError(f"ring's {fn.__name__} has no XLA lowering (inside jit_compile=True, ring runs "
                               f"allreduce, grouped_allreduce, allgather, broadcast, alltoall and reducescatter): "
                               f"call it outside the compiled function, or use jit_compile=False")
        try:
            if tf.executing_eagerly() and threading.current_thread() is threading.main_thread():
                return _native.answer_signals(functools.partial(fn, *args, **kwargs))
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            found = _ERROR.search(e.message or "")
            cls = getattr(exceptions, found.group(1), None) if found else None
            if cls is None or not tf.executing_eagerly():
                raise
            raise cls(e.message[found.end():].split(" [Op:")[0]) from None
    return call


# ---------------------------------------------------------------- collectives
def _xla(collective: int, xs: Sequence[tf.Tensor], names: Sequence[str], **attrs: Any) -> List[tf.Tensor]:
    """``xs`` through one RingXlaCollective, ordered after the previous one
    traced into the same graph (its first output is an unread input)."""
    lib = library()
    if not getattr(lib, "ring_has_xla", False):
        raise RuntimeError(f"{XLA_ERROR} ({_native_ops.describe('tensorflow')})")
    graph = tf.compat.v1.get_default_graph()
    last = getattr(graph, "_ring_xla_last", None)
    outs = list(lib.ring_xla_collective(list(xs), [] if last is None else [last], collective=collective,
                                        names=list(names), **attrs))
    graph._ring_xla_last = outs[0]
    return outs


@_ring_errors
def allreduce(xs: Sequence[tf.Tensor], names: Sequence[str], op: int, prescale: float, postscale: float,
              process_set: int) -> List[tf.Tensor]:
    """Every tensor of ``xs`` reduced (one op: the engine fuses them)."""
    lib = library()
    attrs = dict(reduce_op=op, prescale_factor=prescale, postscale_factor=postscale, process_set_id=process_set)
    if _compiled():
        return _xla(_native.OP_ALLREDUCE, xs, names, **attrs)
    if len(xs) > 1 and _execute is not None and all(isinstance(x, _EagerTensor) for x in xs):
        return _execute_grouped(xs, names, attrs)
    if len(xs) == 1:
        return [lib.ring_allreduce(xs[0], names[0], **attrs)]
    return list(lib.ring_grouped_allreduce(list(xs), list(names), **attrs))


# TensorFlow's eager executor, to run RingGroupedAllreduce without the
# generated wrapper, which converts each input again (about 1.5 us a tensor,
# 0.3 ms of 200 tensors). None where TensorFlow moved it: the wrapper then.
try:
    from tensorflow.python.eager import context as _context
    from tensorflow.python.eager import execute as _execute
    from tensorflow.python.framework.ops import EagerTensor as _EagerTensor
except ImportError:  # pragma: no cover
    _execute = None


def _execute_grouped(xs: Sequence[tf.Tensor], names: Sequence[str], attrs: dict) -> List[tf.Tensor]:
    """RingGroupedAllreduce run eagerly on tensors (not variables), recorded
    on any gradient tape as the wrapper would."""
    inputs = list(xs) + [tf.constant(list(names))]
    flat = ("T", [x.dtype.as_datatype_enum for x in xs], "reduce_op", attrs["reduce_op"], "prescale_factor",
            float(attrs["prescale_factor"]), "postscale_factor", float(attrs["postscale_factor"]), "process_set_id",
            attrs["process_set_id"])
    outs = _execute.quick_execute("RingGroupedAllreduce", len(xs), inputs, flat, _context.context())
    if _execute.must_record_gradient():
        _execute.record_gradient("RingGroupedAllreduce", inputs, flat, outs)
    return list(outs)


def native_group_allreduce(tensors: Sequence[Any], names: Sequence[str], op: int, prescale: float,
                           postscale: float, process_set: Any) -> Optional[List[tf.Tensor]]:
    """The tensors reduced as one group by the op library, or None without
    it (:meth:`ring_strategy._fused.Flattener.native_group`)."""
    if library() is None:
        return None
    from ring_strategy.process_sets import place_of

    return allreduce(tensors, names, op, prescale, postscale, place_of(process_set).id)


@_ring_errors
def allgather(x: tf.Tensor, name: str, process_set: int) -> tf.Tensor:
    """Compiled by XLA, every rank must give the same number of rows."""
    if _compiled():
        return _xla(_native.OP_ALLGATHER, [x], [name], process_set_id=process_set)[0]
    return library().ring_allgather(x, name, process_set_id=process_set)


@_ring_errors
def broadcast(x: tf.Tensor, root: int, name: str, process_set: int) -> tf.Tensor:
    if _compiled():
        return _xla(_native.OP_BROADCAST, [x], [name], root_rank=root, process_set_id=process_set)[0]
    return library().ring_broadcast(x, name, root_rank=root, process_set_id=process_set)


@_ring_errors
def alltoall(x: tf.Tensor, splits: Optional[tf.Tensor], name: str, process_set: int,
             set_size: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """``splits`` None: even blocks (the kernel divides the rows by the set's
    ``set_size`` ranks). Compiled by XLA, shapes are static: even blocks only."""
    if _compiled():
        if splits is not None:
            raise RuntimeError("inside jit_compile=True ring's alltoall sends even blocks (shapes are static): "
                               "call it without splits, or outside the compiled function")
        out = _xla(_native.OP_ALLTOALL, [x], [name], process_set_id=process_set)[0]
        return out, tf.fill([set_size], tf.cast(tf.shape(x)[0] // set_size, tf.int32))
    s = tf.zeros([0], tf.int64) if splits is None else tf.cast(tf.reshape(splits, [-1]), tf.int64)
    out = library().ring_alltoall(x, s, name, process_set_id=process_set)
    return out.received, out.received_splits


@_ring_errors
def reducescatter(x: tf.Tensor, op: int, name: str, process_set: int) -> tf.Tensor:
    if _compiled():
        return _xla(_native.OP_REDUCESCATTER, [x], [name], reduce_op=op, process_set_id=process_set)[0]
    return library().ring_reducescatter(x, name, reduce_op=op, process_set_id=process_set)


@_ring_errors
def join() -> tf.Tensor:
    return library().ring_join()


@_ring_errors
def barrier(name: str, process_set: int) -> Any:
    return library().ring_barrier(name, process_set_id=process_set)


@_ring_errors
def query(what: int, process_set: int = 0, name: Optional[str] = None) -> tf.Tensor:
    return library().ring_query(query=what, process_set_id=process_set, name=name)


# ---------------------------------------------------------------- gradients
def _set(op: Any) -> int:
    return op.get_attr("process_set_id")


def _reduce_grads(op: Any, grads: Sequence[Any], label: str) -> List[Any]:
    """The gradient of a (grouped) allreduce: the same reduction of the
    incoming gradients (None for Min, Max and Product, as Horovod)."""
    reduce_op = op.get_attr("reduce_op")
    n = len(op.outputs)
    if reduce_op not in (Sum, Average, Adasum):
        return [None] * (n + 1)
    dys = [tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(grads, op.outputs)]
    names = group_names(op_name(label, None, _set(op)), n, n > 1)
    out = allreduce(dys, names, reduce_op, op.get_attr("prescale_factor"), op.get_attr("postscale_factor"), _set(op))
    return out + [None]  # the names input has no gradient


@tf.RegisterGradient("RingAllreduce")
def _allreduce_grad(op: Any, grad: Any) -> List[Any]:
    return _reduce_grads(op, [grad], "allreduce")


@tf.RegisterGradient("RingGroupedAllreduce")
def _grouped_allreduce_grad(op: Any, *grads: Any) -> List[Any]:
    return _reduce_grads(op, grads, "grouped_allreduce")


@tf.RegisterGradient("RingAllgather")
def _allgather_grad(op: Any, grad: Any) -> List[Any]:
    """This rank's rows of the summed incoming gradient."""
    x, ps = op.inputs[0], _set(op)
    summed = allreduce([tf.convert_to_tensor(grad)], [op_name("allreduce", None, ps)], Sum, 1.0, 1.0, ps)[0]
    rows = tf.shape(x, out_type=tf.int64)[:1] if x.shape.rank != 0 else tf.constant([1], tf.int64)
    counts = allgather(rows, op_name("allgather", None, ps), ps)
    me = query(QUERY_SET_RANK, ps)
    offset = tf.reduce_sum(counts[:me])
    return [tf.reshape(summed[offset:offset + counts[me]], tf.shape(x)), None]


@tf.RegisterGradient("RingBroadcast")
def _broadcast_grad(op: Any, grad: Any) -> List[Any]:
    """The summed incoming gradient on the root, zeros elsewhere."""
    ps = _set(op)
    summed = allreduce([tf.convert_to_tensor(grad)], [op_name("allreduce", None, ps)], Sum, 1.0, 1.0, ps)[0]
    on_root = tf.equal(query(QUERY_RANK), op.get_attr("root_rank"))
    return [tf.where(on_root, summed, tf.zeros_like(summed)), None]


@tf.RegisterGradient("RingAlltoall")
def _alltoall_grad(op: Any, grad: Any, _received_grad: Any) -> List[Any]:
    """The reverse alltoall: the received rows go back to where they came from."""
    ps = _set(op)
    back, _ = alltoall(tf.convert_to_tensor(grad), op.outputs[1], op_name("alltoall", None, ps), ps,
                       op.outputs[1].shape[0] or 0)
    return [back, None, None]


@tf.RegisterGradient("RingReducescatter")
def _reducescatter_grad(op: Any, grad: Any) -> List[Any]:
    """The allgather of the incoming gradient (divided by the set's size for Average)."""
    ps = _set(op)
    gathered = allgather(tf.convert_to_tensor(grad), op_name("allgather", None, ps), ps)
    if op.get_attr("reduce_op") == Average:
        gathered = gathered / tf.cast(query(QUERY_SET_SIZE, ps), gathered.dtype)
    return [gathered, None]


@tf.RegisterGradient("RingXlaCollective")
def _xla_collective_grad(op: Any, *grads: Any) -> List[Any]:
    """Inside compiled code: allreduce's gradient, as for
    RingGroupedAllreduce; a reducescatter's, the allgather of the incoming
    gradient (its rows must then divide evenly); an alltoall's, the reverse
    alltoall. The ordering inputs have none. Broadcast and allgather are not
    differentiable there: their gradients need this rank's index as a tensor."""
    collective, after = op.get_attr("collective"), len(op.inputs) - len(op.outputs)
    if collective == _native.OP_ALLREDUCE:
        return _reduce_grads(op, grads, "grouped_allreduce")[:-1] + [None] * after
    if collective not in (_native.OP_REDUCESCATTER, _native.OP_ALLTOALL):
        raise NotImplementedError("the gradients of ring's broadcast and allgather inside jit_compile=True are not "
                                  "available: differentiate them outside the compiled function")
    ps, dy = _set(op), tf.convert_to_tensor(grads[0])
    if collective == _native.OP_ALLTOALL:
        return [_xla(_native.OP_ALLTOALL, [dy], [op_name("alltoall", None, ps)], process_set_id=ps)[0]] + \
            [None] * after
    gathered = _xla(_native.OP_ALLGATHER, [dy], [op_name("allgather", None, ps)], process_set_id=ps)[0]
    if op.get_attr("reduce_op") == Average:
        gathered = gathered / tf.cast(tf.shape(gathered)[0] // tf.shape(dy)[0], gathered.dtype)
    return [gathered] + [None] * after


tf.no_gradient("RingJoin")
tf.no_gradient("RingBarrier")
tf.no_gradient("RingQuery")
