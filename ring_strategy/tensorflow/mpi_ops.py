"""Horovod-compatible collectives on TensorFlow tensors.

Every operation works eagerly, inside ``tf.function`` and in TF1 graphs. By
default each is one of ring's TensorFlow ops
(:mod:`ring_strategy.tensorflow.native_ops`): an asynchronous kernel that
queues into the engine and finishes from its callback. Where the op library
cannot be built or loaded (or ``RING_NATIVE_OPS=0``), the fallback hands the
tensors to the engine through host calls: eagerly as numpy views, in a graph
as stateful ``tf.numpy_function`` calls that ``tf.function``'s automatic
control dependencies run in program order (XLA cannot compile those). Graph
ops take their default engine name from the graph's unique op names
(``"tf.allreduce_1"``), which do not depend on how often a function was
traced.

Each op has a gradient, as in Horovod: an allreduce's gradient is the same
allreduce of the incoming gradient, an allgather's the summed gradient's rows
of this rank, a broadcast's the summed gradient on the root (zero elsewhere),
an alltoall's the reverse alltoall, a reducescatter's an allgather.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ring_strategy import ops as _np
from ring_strategy._core.arrays import allreduce_group
from ring_strategy._host_call import in_xla_context, tensorflow_call  # noqa: F401  (in_xla_context re-exported)
from ring_strategy._core.rules import (  # noqa: F401  (re-exported, as Horovod's mpi_ops does)
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    handle_average_backwards_compatibility,
)
from ring_strategy._core.handles import group_names
from ring_strategy._core.rules import (alltoall_splits, check_op, check_root, check_sparse_op, reducescatter_rows,
                                       require_rows)
from ring_strategy.basics import (  # noqa: F401  (re-exported)
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.process_sets import ProcessSet, place_of, by_id, global_process_set  # noqa: F401
from ring_strategy.tensorflow import native_ops as _ops
from ring_strategy.tensorflow.compression import Compression
from ring_strategy.tensorflow.native_ops import op_name as _op_name

# AutoGraph must not rewrite these functions when a tf.function calls them:
# they hold no tensor-dependent Python control flow, and converting them
# costs a second of tracing per call site.
_do_not_convert = tf.autograph.experimental.do_not_convert


@_do_not_convert
def host_call(fn: Callable[[List[np.ndarray]], List[np.ndarray]], inputs: Sequence[tf.Tensor],
              out_dtypes: Sequence[tf.DType], out_shapes: Sequence[Any], label: str) -> List[tf.Tensor]:
    """``fn`` (numpy arrays in, numpy arrays out) on ``inputs``: called at once
    in eager mode, as a stateful ``tf.numpy_function`` in a graph; refused
    under XLA (see :mod:`ring_strategy._host_call`)."""
    return tensorflow_call(fn, inputs, out_dtypes, out_shapes, label)


def _tensor(x: Any, what: str = "tensor") -> tf.Tensor:
    if isinstance(x, (tf.Tensor, tf.IndexedSlices)):  # no conversion (about 1 us a tensor)
        return x
    try:
        return tf.convert_to_tensor(x)
    except (TypeError, ValueError) as e:
        raise BadArgumentError(f"{what} should be a tf.Tensor. Got: {type(x).__name__}") from e


# _recording(): whether a gradient tape (or forward accumulator) may record
# an eager operation now; True where TensorFlow cannot say. Without one an
# eager allreduce skips ``tf.custom_gradient``, which costs tens of
# microseconds a call (its decorator is built per call).
try:
    from tensorflow.python.eager.record import could_possibly_record as _recording
except ImportError:  # pragma: no cover - TensorFlow moved it: assume a tape may record
    def _recording() -> bool:
        return True


# ---------------------------------------------------------------- allreduce
def _allreduce(x: tf.Tensor, op: int, prescale: float, postscale: float, name: Optional[str],
               process_set: ProcessSet = global_process_set) -> tf.Tensor:
    return _grouped([x], op, prescale, postscale, name, "allreduce", process_set)[0]


def _grouped(xs: List[tf.Tensor], op: int, prescale: float, postscale: float, name: Optional[str],
             label: str, process_set: ProcessSet = global_process_set) -> List[tf.Tensor]:
    single = len(xs) == 1
    place = place_of(process_set)
    names = group_names(_op_name(label, name, place.id), len(xs), not single)
    if _ops.library() is not None:
        return _ops.allreduce(xs, names, op, prescale, postscale, place.id)

    def reduce(arrays):
        return allreduce_group(arrays, names, op, prescale, postscale, process_set)

    kind = "RingAllreduce" if single else "RingGroupedAllreduce"
    if tf.executing_eagerly() and not _recording():
        return host_call(reduce, xs, [t.dtype for t in xs], [t.shape for t in xs], kind)

    @tf.custom_gradient
    def forward(*inputs):
        outs = host_call(reduce, inputs, [t.dtype for t in inputs], [t.shape for t in inputs], kind)

        def grad(*dys):
            if op not in (Sum, Average, Adasum):
                return [None] * len(dys)
            dys = [tf.zeros_like(x) if d is None else tf.convert_to_tensor(d) for d, x in zip(dys, inputs)]
            return _grouped(dys, op, prescale, postscale, None, label, process_set)

        return outs, grad

    return list(forward(*xs))


@_do_not_convert
def allreduce(tensor: Any, average: Optional[bool] = None, device_dense: str = "", device_sparse: str = "",
              compression: Any = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set, ignore_name_scope: bool = False) -> Any:
    """Reduces ``tensor`` over all ranks (Average by default).

    Args:
        tensor: a tf.Tensor of the same shape and dtype on every rank, or a
            ``tf.IndexedSlices`` (its values and indices are allgathered).
        average: deprecated; use ``op``.
        device_dense: accepted for Horovod compatibility (CPU only).
        device_sparse: as ``device_dense``.
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        op: Average (default), Sum, Min, Max, Product or Adasum (docs/adasum.md).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        name: the engine's name for the tensor, the same on every rank.
        process_set: the ranks taking part (default: every rank).
        ignore_name_scope: accepted for Horovod compatibility.

    Returns:
        The reduced tensor (or IndexedSlices), identical on every rank.
    """
    op = check_op(handle_average_backwards_compatibility(op, average))
    place = place_of(process_set)
    tensor = _tensor(tensor)
    if isinstance(tensor, tf.IndexedSlices):
        check_sparse_op(op)
        if op not in (Sum, Average):
            raise NotImplementedError(f"allreduce of IndexedSlices supports op=Sum or Average. Got: {op!r}")
        base = name or _op_name("allreduce", None, place.id)
        values = allgather(tensor.values, name=f"{base}.values", process_set=process_set)
        indices = allgather(tensor.indices, name=f"{base}.indices", process_set=process_set)
        scale = prescale_factor * postscale_factor
        if scale != 1.0:
            values = values * tf.cast(scale, values.dtype)
        if op == Average:
            values = values / tf.cast(set_size(place), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tensor)
    return compression.decompress(
        _allreduce(compressed, op, prescale_factor, postscale_factor, name, process_set), ctx)


@_do_not_convert
def grouped_allreduce(tensors: Sequence[Any], average: Optional[bool] = None, device_dense: str = "",
                      device_sparse: str = "", compression: Any = Compression.none, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set, name: Optional[str] = None) -> List[tf.Tensor]:
    """Reduces every tensor of ``tensors`` in one operation (one host call;
    the engine fuses them). Arguments as for :func:`allreduce`."""
    op = check_op(handle_average_backwards_compatibility(op, average))
    place_of(process_set)
    tensors = [_tensor(t) for t in tensors]
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set) for t in tensors]
    pairs = [compression.compress(t) for t in tensors]
    outs = _grouped([p[0] for p in pairs], op, prescale_factor, postscale_factor, name, "grouped_allreduce",
                    process_set)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---------------------------------------------------------------- allgather
def _gathered_shape(x: tf.Tensor) -> tf.TensorShape:
    return tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else tf.TensorShape([None])


def _allgather_group(xs: List[tf.Tensor], name: Optional[str], label: str, grouped: bool,
                     process_set: ProcessSet = global_process_set) -> List[tf.Tensor]:
    """Every tensor of ``xs`` allgathered over ``process_set`` in one host call
    (one engine operation each). The gradient of each is this rank's rows of
    the summed incoming gradient."""
    place = place_of(process_set)
    names = group_names(_op_name(label, name, place.id), len(xs), grouped)
    if _ops.library() is not None:
        # a scalar counts as one row, as in the numpy core
        return [_ops.allgather(tf.reshape(x, [1]) if x.shape.rank == 0 else x, nm, place.id)
                for x, nm in zip(xs, names)]

    def gather(arrays):
        handles = [_np.allgather_async(a, name=nm, process_set=process_set) for a, nm in zip(arrays, names)]
        return [_np.synchronize(h) for h in handles]

    @tf.custom_gradient
    def forward(*inputs):
        ys = host_call(gather, inputs, [x.dtype for x in inputs], [_gathered_shape(x) for x in inputs],
                       "RingGroupedAllgather" if grouped else "RingAllgather")

        def grad(*dys):
            dys = [tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(dys, ys)]
            summed = _grouped(dys, Sum, 1.0, 1.0, None, "grouped_allreduce" if grouped else "allreduce", process_set)
            rows = tf.stack([tf.shape(tf.reshape(x, [-1]) if x.shape.rank == 0 else x, out_type=tf.int64)[0]
                             for x in inputs])
            # [set size, len(xs)]: every rank's rows of each tensor
            counts = allgather(tf.reshape(rows, [1, -1]), process_set=process_set)
            offsets = tf.reduce_sum(counts[:place.rank], axis=0)
            mine = counts[place.rank]
            return [tf.reshape(s[offsets[i]:offsets[i] + mine[i]], tf.shape(x))
                    for i, (s, x) in enumerate(zip(summed, inputs))]

        return ys, grad

    return list(forward(*xs))


@_do_not_convert
def allgather(tensor: Any, name: Optional[str] = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank
    order (the set's ranks, ascending); the first dimension may differ between ranks."""
    return _allgather_group([_tensor(tensor)], name, "allgather", False, process_set)[0]


@_do_not_convert
def grouped_allgather(tensors: Sequence[Any], name: Optional[str] = None, ignore_name_scope: bool = False,
                      process_set: ProcessSet = global_process_set) -> List[tf.Tensor]:
    """:func:`allgather` of each tensor of ``tensors``, in one host call (the
    engine fuses them); returns the list."""
    place_of(process_set)
    tensors = [_tensor(t) for t in tensors]
    return _allgather_group(tensors, name, "grouped_allgather", True, process_set) if tensors else []


# ---------------------------------------------------------------- broadcast
@_do_not_convert
def broadcast(tensor: Any, root_rank: int, name: Optional[str] = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank of the set
    (``root_rank`` is a global rank in it)."""
    place = place_of(process_set)
    root_rank = check_root(root_rank)
    x = _tensor(tensor)
    name = _op_name("broadcast", name, place.id)
    if _ops.library() is not None:
        return _ops.broadcast(x, root_rank, name, place.id)

    def bcast(a):
        return [_np.broadcast(a[0], root_rank, name=name, process_set=process_set).reshape(a[0].shape)]

    @tf.custom_gradient
    def forward(x):
        y = host_call(bcast, [x], [x.dtype], [x.shape], "RingBroadcast")[0]

        def grad(dy):
            reduced = _allreduce(tf.convert_to_tensor(dy), Sum, 1.0, 1.0, None, process_set)
            return reduced if rank() == root_rank else reduced * 0

        return y, grad

    return forward(x)


# ---------------------------------------------------------------- alltoall
@_do_not_convert
def alltoall(tensor: Any, splits: Any = None, name: Optional[str] = None, ignore_name_scope: bool = False,
             process_set: ProcessSet = global_process_set) -> Tuple[Any, Any]:
    """Sends block r of ``tensor``'s rows to rank r and gathers the blocks sent here.

    Args:
        tensor: rows to scatter (at least one dimension).
        splits: rows for each rank (sums to the first dimension); even
            blocks when omitted.
        name: the engine's name, the same on every rank.

    Returns:
        ``(output, received_splits)``: the received rows in rank order and
        how many came from each rank (int32).
    """
    place = place_of(process_set)
    x = _tensor(tensor)
    require_rows("alltoall", x.shape.rank)
    name = _op_name("alltoall", name, place.id)
    if _ops.library() is not None:
        return _ops.alltoall(x, None if splits is None else tf.convert_to_tensor(splits), name, place.id,
                           place.size)
    n = place.size
    out_shape = tf.TensorShape([None]).concatenate(x.shape[1:])
    inputs = [x]
    if splits is not None:
        inputs.append(tf.cast(tf.reshape(tf.convert_to_tensor(splits), [-1]), tf.int64))

    def exchange(arrays):
        a = arrays[0]
        s = alltoall_splits(arrays[1] if len(arrays) > 1 else None, a.shape[0], n)
        out, received = _np.alltoall(a, s, name=name, process_set=process_set)
        return [out, received.astype(np.int32)]

    @tf.custom_gradient
    def forward(x):
        out, received = host_call(exchange, [x] + inputs[1:], [x.dtype, tf.int32], [out_shape, [n]], "RingAlltoall")

        def grad(dy, d_received=None):
            back, _ = alltoall(tf.convert_to_tensor(dy), splits=received, process_set=process_set)
            return back

        return (out, received), grad

    return forward(x)


# ---------------------------------------------------------------- reducescatter
def _reducescatter_group(xs: List[tf.Tensor], op: int, prescale: float, postscale: float, name: Optional[str],
                         label: str, grouped: bool, process_set: ProcessSet = global_process_set) -> List[tf.Tensor]:
    """Every tensor of ``xs`` reduce-scattered over ``process_set`` in one
    host call. The gradient of each is the allgather of the incoming
    gradient, scaled as the forward pass scaled its input."""
    for x in xs:
        require_rows(label, x.shape.rank)
    place = place_of(process_set)
    names = group_names(_op_name(label, name, place.id), len(xs), grouped)
    if _ops.library() is not None:
        return _native_reducescatter(xs, op, prescale, postscale, names, place.id)
    n = place.size
    out_shapes = [tf.TensorShape([None if x.shape[0] is None else reducescatter_rows(x.shape[0], n, place.rank)])
                  .concatenate(x.shape[1:]) for x in xs]

    def scatter(arrays):
        handles = [_np.reducescatter_async(a, op=op, name=nm, process_set=process_set)
                   for a, nm in zip(arrays, names)]
        return [_np.synchronize(h) for h in handles]

    @tf.custom_gradient
    def forward(*inputs):
        scaled = [x * tf.cast(prescale, x.dtype) for x in inputs] if prescale != 1.0 else list(inputs)
        ys = host_call(scatter, scaled, [x.dtype for x in inputs], out_shapes,
                       "RingGroupedReducescatter" if grouped else "RingReducescatter")
        if postscale != 1.0:
            ys = [y * tf.cast(postscale, y.dtype) for y in ys]

        def grad(*dys):
            dys = [tf.zeros_like(y) if d is None else tf.convert_to_tensor(d) for d, y in zip(dys, ys)]
            gs = _allgather_group(dys, None, "grouped_allgather" if grouped else "allgather", grouped, process_set)
            scale = prescale * postscale / (n if op == Average else 1)
            return [g * tf.cast(scale, g.dtype) for g in gs] if scale != 1.0 else gs

        return ys, grad

    return list(forward(*xs))


def _native_reducescatter(xs: List[tf.Tensor], op: int, prescale: float, postscale: float, names: Sequence[str],
                          process_set: int) -> List[tf.Tensor]:
    """Reducescatter through the op library; the scale factors are plain
    multiplications around it, so their gradients are TensorFlow's own."""
    ys = []
    for x, nm in zip(xs, names):
        scaled = x * tf.cast(prescale, x.dtype) if prescale != 1.0 else x
        y = _ops.reducescatter(scaled, op, nm, process_set)
        ys.append(y * tf.cast(postscale, y.dtype) if postscale != 1.0 else y)
    return ys


@_do_not_convert
def reducescatter(tensor: Any, device_dense: str = "", compression: Any = Compression.none, op: int = Average,
                  name: Optional[str] = None, process_set: ProcessSet = global_process_set,
                  ignore_name_scope: bool = False, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduces ``tensor`` over all ranks and returns this rank's block of rows
    (lower ranks get one extra row when the rows do not divide evenly)."""
    op = check_op(op)
    compressed, ctx = compression.compress(_tensor(tensor))
    out = _reducescatter_group([compressed], op, prescale_factor, postscale_factor, name, "reducescatter", False,
                               process_set)
    return compression.decompress(out[0], ctx)


@_do_not_convert
def grouped_reducescatter(tensors: Sequence[Any], device_dense: str = "", compression: Any = Compression.none,
                          op: int = Average, process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          name: Optional[str] = None) -> List[tf.Tensor]:
    """:func:`reducescatter` of each tensor of ``tensors``, in one host call;
    returns the list. Arguments as for :func:`reducescatter`."""
    op = check_op(op)
    place_of(process_set)
    pairs = [compression.compress(_tensor(t)) for t in tensors]
    if not pairs:
        return []
    outs = _reducescatter_group([p[0] for p in pairs], op, prescale_factor, postscale_factor, name,
                                "grouped_reducescatter", True, process_set)
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def barrier(process_set: ProcessSet = global_process_set) -> Any:
    """Returns once every rank of ``process_set`` has called ``barrier()``;
    in a graph (with the op library), the op that waits so when it runs."""
    place = place_of(process_set)
    if _ops.library() is not None:
        return _ops.barrier(_op_name("barrier", None, place.id), place.id)
    _np.barrier(process_set)
    return None


# ---------------------------------------------------------------- join, process queries as ops
def _scalar_op(value: Callable[[], int], label: str) -> tf.Tensor:
    """An int32 scalar whose value ``value()`` gives when the op runs (at
    once eagerly, at every run of the graph otherwise)."""
    return host_call(lambda _: [np.asarray(value(), dtype=np.int32)], [], [tf.int32], [tf.TensorShape([])],
                     label)[0]


@_do_not_convert
def join() -> tf.Tensor:
    """Declares that this rank has run out of data, as Horovod's ``join``.

    Until every rank has joined, this rank takes part in the allreduces the
    others still submit (DistributedGradientTape's and DistributedOptimizer's
    included) by adding zeros; ``Average`` still divides by ``size()``. Other
    collectives raise ``BadArgumentError`` while a rank has joined. Works
    eagerly and in a graph.

    Returns:
        An int32 scalar tensor: the rank that joined last, on every rank.
    """
    if _ops.library() is not None:
        return _ops.join()
    return _scalar_op(_np.join, "RingJoin")


def set_size(place: Any) -> Any:
    """The size of a process set (a :class:`SetPlace`): a number when eager;
    in a graph, an op that reads it at each run, since an elastic world may
    change size between two runs of one traced function."""
    if tf.executing_eagerly():
        return place.size
    return size_op(place.id)


def size_op(process_set_id: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """An op giving the size of the process set with this id (int32; 0:
    :func:`size`) when it runs."""
    ps = by_id(process_set_id)
    if _ops.library() is not None:
        return _ops.query(_ops.QUERY_SET_SIZE, process_set_id, name)
    return _scalar_op(lambda: ps.size(), name or "RingSize")


def process_set_included_op(process_set_id: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """An op giving 1 when this rank is in the process set with this id, 0
    otherwise (int32), when it runs."""
    ps = by_id(process_set_id)
    if _ops.library() is not None:
        return tf.cast(_ops.query(_ops.QUERY_SET_RANK, process_set_id, name) >= 0, tf.int32)
    return _scalar_op(lambda: int(bool(ps.included())), name or "RingProcessSetIncluded")


def local_size_op(name: Optional[str] = None) -> tf.Tensor:
    """An op giving :func:`local_size` (int32) when it runs."""
    if _ops.library() is not None:
        return _ops.query(_ops.QUERY_LOCAL_SIZE, 0, name)
    return _scalar_op(local_size, name or "RingLocalSize")


def rank_op(name: Optional[str] = None) -> tf.Tensor:
    """An op giving :func:`rank` (int32) when it runs."""
    if _ops.library() is not None:
        return _ops.query(_ops.QUERY_RANK, 0, name)
    return _scalar_op(rank, name or "RingRank")


def local_rank_op(name: Optional[str] = None) -> tf.Tensor:
    """An op giving :func:`local_rank` (int32) when it runs."""
    if _ops.library() is not None:
        return _ops.query(_ops.QUERY_LOCAL_RANK, 0, name)
    return _scalar_op(local_rank, name or "RingLocalRank")
