"""Horovod-compatible collectives on TensorFlow tensors.

Every operation works eagerly and inside ``tf.function``. Eagerly, the
tensor is handed to the engine as a numpy view; in a graph, the operation is
a stateful ``tf.numpy_function``, so ``tf.function``'s automatic control
dependencies run the collectives of one function in program order on every
rank. Graph ops take their default engine name from the graph's unique op
names (``"tf.allreduce_1"``), which do not depend on how often a function was
traced. XLA cannot compile these ops: call them outside ``jit_compile=True``.

Each op has a gradient, as in Horovod: an allreduce's gradient is the same
allreduce of the incoming gradient, an allgather's the summed gradient's rows
of this rank, a broadcast's the summed gradient on the root (zero elsewhere),
an alltoall's the reverse alltoall, a reducescatter's an allgather.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ring_strategy import _handles
from ring_strategy import ops as _np
from ring_strategy._host_call import in_xla_context, tensorflow_call  # noqa: F401  (in_xla_context re-exported)
from ring_strategy._rules import (  # noqa: F401  (re-exported, as Horovod's mpi_ops does)
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    handle_average_backwards_compatibility,
)
from ring_strategy._rules import (alltoall_splits, check_op, check_root, check_sparse_op, group_names,
                                  reducescatter_rows, require_rows)
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
from ring_strategy.process_sets import ProcessSet, _check_process_set, global_process_set  # noqa: F401
from ring_strategy.tensorflow.compression import Compression

# AutoGraph must not rewrite these functions when a tf.function calls them:
# they hold no tensor-dependent Python control flow, and converting them
# costs a second of tracing per call site.
_do_not_convert = tf.autograph.experimental.do_not_convert


def _op_name(label: str, name: Optional[str], process_set: int = 0) -> str:
    """``name``, or a generated one counted per label and process set (engine id)."""
    if name is not None or tf.executing_eagerly():
        return _handles.auto_name(label, name, process_set)
    scoped = label if process_set == 0 else f"{label}_set{process_set}"
    return "tf." + tf.compat.v1.get_default_graph().unique_name(scoped)


@_do_not_convert
def host_call(fn: Callable[[List[np.ndarray]], List[np.ndarray]], inputs: Sequence[tf.Tensor],
              out_dtypes: Sequence[tf.DType], out_shapes: Sequence[Any], label: str) -> List[tf.Tensor]:
    """``fn`` (numpy arrays in, numpy arrays out) on ``inputs``: called at once
    in eager mode, as a stateful ``tf.numpy_function`` in a graph; refused
    under XLA (see :mod:`ring_strategy._host_call`)."""
    return tensorflow_call(fn, inputs, out_dtypes, out_shapes, label)


def _tensor(x: Any, what: str = "tensor") -> tf.Tensor:
    if isinstance(x, tf.IndexedSlices):
        return x
    try:
        return tf.convert_to_tensor(x)
    except (TypeError, ValueError) as e:
        raise BadArgumentError(f"{what} should be a tf.Tensor. Got: {type(x).__name__}") from e


# ---------------------------------------------------------------- allreduce
def _allreduce(x: tf.Tensor, op: int, prescale: float, postscale: float, name: Optional[str],
               process_set: ProcessSet = global_process_set) -> tf.Tensor:
    return _grouped([x], op, prescale, postscale, name, "allreduce", process_set)[0]


def _grouped(xs: List[tf.Tensor], op: int, prescale: float, postscale: float, name: Optional[str],
             label: str, process_set: ProcessSet = global_process_set) -> List[tf.Tensor]:
    single = len(xs) == 1
    names = group_names(_op_name(label, name, _check_process_set(process_set).id), len(xs), not single)

    def reduce(arrays):
        handles = [_np.allreduce_async(a, op, nm, prescale, postscale, process_set=process_set)
                   for a, nm in zip(arrays, names)]
        # The numpy API returns 0-d inputs as shape (1,); keep the input's shape.
        return [_np.synchronize(h).reshape(a.shape) for h, a in zip(handles, arrays)]

    @tf.custom_gradient
    def forward(*inputs):
        outs = host_call(reduce, inputs, [t.dtype for t in inputs], [t.shape for t in inputs],
                         "RingAllreduce" if single else "RingGroupedAllreduce")

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
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        op: Average (default), Sum, Min, Max, Product or Adasum (docs/adasum.md).
        prescale_factor, postscale_factor: multiply the input before and the
            result after the reduction.
        name: the engine's name for the tensor, the same on every rank.
        process_set: the ranks taking part (default: every rank).
        ignore_name_scope: accepted for Horovod compatibility.

    Returns:
        The reduced tensor (or IndexedSlices), identical on every rank.
    """
    op = check_op(handle_average_backwards_compatibility(op, average))
    place = _check_process_set(process_set)
    tensor = _tensor(tensor)
    if isinstance(tensor, tf.IndexedSlices):
        check_sparse_op(op)
        if op not in (Sum, Average):
            raise NotImplementedError(f"allreduce of IndexedSlices supports op=Sum or Average. Got: {op!r}")
        base = name or _op_name("allreduce", None, place.id)
        values = allgather(tensor.values, name=f"{base}.values", process_set=process_set)
        indices = allgather(tensor.indices, name=f"{base}.indices", process_set=process_set)
        scale = prescale_factor * postscale_factor / (place.size if op == Average else 1)
        if scale != 1.0:
            values = values * tf.cast(scale, values.dtype)
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
    _check_process_set(process_set)
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
@_do_not_convert
def allgather(tensor: Any, name: Optional[str] = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank
    order (the set's ranks, ascending); the first dimension may differ between ranks."""
    place = _check_process_set(process_set)
    x = _tensor(tensor)
    name = _op_name("allgather", name, place.id)
    out_shape = tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else tf.TensorShape([None])

    @tf.custom_gradient
    def forward(x):
        y = host_call(lambda a: [_np.allgather(a[0], name=name, process_set=process_set)], [x], [x.dtype],
                      [out_shape], "RingAllgather")[0]

        def grad(dy):
            summed = _allreduce(tf.convert_to_tensor(dy), Sum, 1.0, 1.0, None, process_set)
            rows = tf.shape(tf.reshape(x, [-1]) if x.shape.rank == 0 else x, out_type=tf.int64)[:1]
            sizes = allgather(rows, process_set=process_set)
            offset = tf.reduce_sum(sizes[:place.rank])
            piece = summed[offset:offset + sizes[place.rank]]
            return tf.reshape(piece, tf.shape(x))

        return y, grad

    return forward(x)


# ---------------------------------------------------------------- broadcast
@_do_not_convert
def broadcast(tensor: Any, root_rank: int, name: Optional[str] = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank of the set
    (``root_rank`` is a global rank in it)."""
    place = _check_process_set(process_set)
    root_rank = check_root(root_rank)
    x = _tensor(tensor)
    name = _op_name("broadcast", name, place.id)

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
             process_set: ProcessSet = global_process_set):
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
    place = _check_process_set(process_set)
    x = _tensor(tensor)
    require_rows("alltoall", x.shape.rank)
    name = _op_name("alltoall", name, place.id)
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
@_do_not_convert
def reducescatter(tensor: Any, device_dense: str = "", compression: Any = Compression.none, op: int = Average,
                  name: Optional[str] = None, process_set: ProcessSet = global_process_set,
                  ignore_name_scope: bool = False, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduces ``tensor`` over all ranks and returns this rank's block of rows
    (lower ranks get one extra row when the rows do not divide evenly)."""
    op = check_op(op)
    place = _check_process_set(process_set)
    x = _tensor(tensor)
    require_rows("reducescatter", x.shape.rank)
    name = _op_name("reducescatter", name, place.id)
    n = place.size
    rows = None if x.shape[0] is None else reducescatter_rows(x.shape[0], n, place.rank)
    out_shape = tf.TensorShape([rows]).concatenate(x.shape[1:])
    compressed, ctx = compression.compress(x)

    @tf.custom_gradient
    def forward(x):
        if prescale_factor != 1.0:
            x = x * tf.cast(prescale_factor, x.dtype)
        y = host_call(lambda a: [_np.reducescatter(a[0], op=op, name=name, process_set=process_set)], [x],
                      [x.dtype], [out_shape], "RingReducescatter")[0]
        if postscale_factor != 1.0:
            y = y * tf.cast(postscale_factor, y.dtype)

        def grad(dy):
            g = allgather(tf.convert_to_tensor(dy), process_set=process_set)
            scale = prescale_factor * postscale_factor / (n if op == Average else 1)
            return g * tf.cast(scale, g.dtype) if scale != 1.0 else g

        return y, grad

    return compression.decompress(forward(compressed), ctx)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank of ``process_set`` has called ``barrier()`` (eager only)."""
    _np.barrier(process_set)
