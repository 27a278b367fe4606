"""DistributedGradientTape: a tf.GradientTape whose gradients are averaged
over all ranks; PartialDistributedGradientTape: the same, except for the
variables of the layers that stay local to each rank."""

from __future__ import annotations

from typing import Any, List, Optional

import tensorflow as tf

from ring_strategy._fused import Flattener, fused_allreduce, reduce_except_local
from ring_strategy._core.rules import predivide_scales
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.tensorflow.compression import Compression
from ring_strategy.tensorflow.native_ops import native_group_allreduce
from ring_strategy.tensorflow.mpi_ops import (
    Adasum,
    Average,
    ProcessSet,
    Sum,
    place_of,
    _do_not_convert,
    _op_name,
    allreduce,
    check_op,
    global_process_set,
    host_call,
    set_size,
)


class _TensorFlowFlattener(Flattener):
    @staticmethod
    def dtype_name(tensor: tf.Tensor) -> str:
        return tensor.dtype.name

    @staticmethod
    def flatten(tensors: List[tf.Tensor]) -> tf.Tensor:
        return tf.concat([tf.reshape(t, [-1]) for t in tensors], 0)

    @staticmethod
    def split(flat: tf.Tensor, likes: List[tf.Tensor]) -> List[tf.Tensor]:
        sizes = [tf.size(t) for t in likes] if len(likes) > 1 else [tf.size(flat)]
        pieces = [tf.reshape(p, tf.shape(t)) for p, t in zip(tf.split(flat, sizes, 0), likes)]
        for p, t in zip(pieces, likes):
            p.set_shape(t.shape)
        return pieces

    @staticmethod
    def host_call(fn: Any, flats: List[tf.Tensor]) -> List[tf.Tensor]:
        return host_call(fn, flats, [f.dtype for f in flats], [f.shape for f in flats], "RingDistributedGradientTape")

    @staticmethod
    def native_group(tensors: List[tf.Tensor], names: List[str], op: int, prescale: float, postscale: float,
                     process_set: ProcessSet) -> Optional[List[tf.Tensor]]:
        return native_group_allreduce(tensors, names, op, prescale, postscale, process_set)


class _DistributedGradientTape(tf.GradientTape):
    """Methods placed in front of the user's tape class; see :func:`DistributedGradientTape`."""

    def register_local_source(self, source: Any) -> None:
        """Marks ``source`` (a variable) as local to this rank: its gradient is
        not reduced, only divided by ``size()`` when the tape was made with
        ``scale_local_gradients=True``."""
        self._ring_local.add(source_key(source))

    @_do_not_convert
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        if place_of(self._ring_process_set).size == 1 and self._ring_compression is Compression.none:
            return grads
        flat = tf.nest.flatten(grads)
        local = [source_key(s) in self._ring_local for s in tf.nest.flatten(sources)] if self._ring_local else None
        return tf.nest.pack_sequence_as(grads, allreduce_gradients(
            flat, self._ring_op, self._ring_compression, self._ring_sparse_as_dense, self._ring_predivide,
            "DistributedGradientTape", local, self._ring_scale_local, self._ring_process_set))


def source_key(source: Any) -> Any:
    """A hashable identity of a variable (or tensor): its tf.Variable's
    ``ref()`` (a Keras variable's ``value`` on the TensorFlow backend)."""
    value = getattr(source, "value", source) if not hasattr(source, "ref") else source
    return value.ref() if hasattr(value, "ref") else id(source)


def _divided(grad: Any, n: Any) -> Any:
    """``grad / n``, ``n`` a number or a scalar tensor (IndexedSlices included)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


def check_gradient_reduction(op: Any, gradient_predivide_factor: Any, process_set: ProcessSet) -> int:
    """The gradient reduction's ``op`` (Average or Sum), checked with the
    predivide factor and the process set; BadArgumentError otherwise."""
    op = check_op(op)
    if op == Adasum:
        raise NotImplementedError("op=Adasum for TensorFlow gradients (DistributedOptimizer, DistributedGradientTape) "
                                  "is not supported; hvd.allreduce(t, op=hvd.Adasum) and the torch "
                                  "DistributedOptimizer support it")
    if op not in (Average, Sum):
        raise BadArgumentError(f"op should be Average or Sum. Got: {op!r}")
    if not isinstance(gradient_predivide_factor, (int, float)) or gradient_predivide_factor <= 0:
        raise BadArgumentError(f"gradient_predivide_factor should be a positive float. Got: {gradient_predivide_factor!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise BadArgumentError(f"gradient_predivide_factor needs op=Average. Got: op={op!r}")
    place_of(process_set)
    return op


def allreduce_gradients(grads: List[Any], op: int, compression: Any, sparse_as_dense: bool,
                        predivide: float, label: str, local: Optional[List[bool]] = None,
                        scale_local: bool = True, process_set: ProcessSet = global_process_set) -> List[Any]:
    """Every gradient of ``grads`` reduced over the ranks of ``process_set`` (None stays None):
    the dense ones in one fused host call, eagerly or in a graph;
    ``IndexedSlices`` allgathered unless ``sparse_as_dense``. The gradients
    marked ``local`` are not reduced: they stay on their rank, divided by
    the set's size with ``scale_local``.

    Args:
        grads: tf tensors, IndexedSlices or None, in the same order on every rank.
        op: Average or Sum.
        compression: the precision the dense gradients travel in.
        sparse_as_dense: reduce IndexedSlices as dense tensors.
        predivide: with Average, divide by this before the sum and by
            ``size() / predivide`` after it.
        label: names the engine's tensors (the graph makes them unique).
        local: per gradient, True when it stays local; None: none does.
        scale_local: divide the local gradients by the set's size.
        process_set: the ranks that reduce (default: every rank).
    """
    if local is not None and any(local):
        def reduce(shared: List[Any]) -> List[Any]:
            return allreduce_gradients(shared, op, compression, sparse_as_dense, predivide, label,
                                       process_set=process_set)

        n = set_size(place_of(process_set))  # one size op per step, read when it runs
        return reduce_except_local(grads, local, reduce, scale_local, lambda g, _: _divided(g, n), process_set)
    place = place_of(process_set)
    prescale, postscale = predivide_scales(op, predivide)
    out = list(grads)
    dense: List[int] = []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            if sparse_as_dense:
                out[i] = g = tf.convert_to_tensor(g)
            else:
                out[i] = allreduce(g, op=op, compression=compression, process_set=process_set)
                continue
        dense.append(i)
    if not dense:
        return out
    wire, ctxs = zip(*[compression.compress(out[i]) for i in dense])
    name = _op_name(label, None, place.id)
    reduced = fused_allreduce(_TensorFlowFlattener, wire, name, op, prescale, postscale, process_set)
    for i, r, ctx in zip(dense, reduced, ctxs):
        out[i] = compression.decompress(r, ctx)
    return out


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                            compression: Any = Compression.none, sparse_as_dense: bool = False,
                            op: int = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                            groups: Any = None, process_set: ProcessSet = global_process_set,
                            scale_local_gradients: bool = True) -> tf.GradientTape:
    """Wraps a ``tf.GradientTape`` so that ``gradient()`` returns gradients
    averaged over all ranks.

    The result is an instance of a subclass of the tape's class sharing its
    recording; ``gradient()`` computes the local gradients, then reduces all
    dense ones in a single host call (flattened into one buffer per dtype),
    eagerly or inside ``tf.function``. ``IndexedSlices`` are allgathered
    unless ``sparse_as_dense``.

    Args:
        gradtape: the tape that recorded the forward pass.
        device_dense: accepted for Horovod compatibility (CPU only).
        device_sparse: as ``device_dense``.
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        sparse_as_dense: reduce IndexedSlices gradients as dense tensors.
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, divide by this before the
            sum and by ``size() / factor`` after it.
        num_groups: accepted for Horovod compatibility; every dense
            gradient is fused anyway.
        groups: as ``num_groups``.
        process_set: the ranks that average (default: every rank).
        scale_local_gradients: divide the gradients of the sources marked
            local (``register_local_source``, or the ``local_layers`` of
            :func:`PartialDistributedGradientTape`) by ``size()``.

    Example::

        import tensorflow as tf, ring_strategy.tensorflow as hvd
        hvd.init()
        w = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(hvd.rank() + 1))
        tape = hvd.DistributedGradientTape(tape)
        grad, = tape.gradient(loss, [w])  # the mean over ranks of rank + 1
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise BadArgumentError(f"gradtape should be a tf.GradientTape. Got: {gradtape!r}")
    op = check_gradient_reduction(op, gradient_predivide_factor, process_set)
    base = type(gradtape)
    cls = type(base.__name__, (_DistributedGradientTape, base), {"__module__": base.__module__})
    tape = object.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._ring_op = op
    tape._ring_compression = compression
    tape._ring_sparse_as_dense = bool(sparse_as_dense)
    tape._ring_predivide = float(gradient_predivide_factor)
    tape._ring_scale_local = bool(scale_local_gradients)
    tape._ring_local = set()
    tape._ring_process_set = process_set
    return tape


def PartialDistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                                   compression: Any = Compression.none, sparse_as_dense: bool = False,
                                   op: int = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                                   groups: Any = None, process_set: ProcessSet = global_process_set,
                                   local_layers: Any = None, scale_local_gradients: bool = True) -> tf.GradientTape:
    """:func:`DistributedGradientTape`, except that the gradients of the
    trainable variables of ``local_layers`` are not reduced: each rank keeps
    its own (divided by ``size()`` with ``scale_local_gradients``), for
    layers whose weights differ between ranks (model parallelism).

    Args:
        local_layers: a Keras layer or a list of them; None: every gradient
            is reduced, as with :func:`DistributedGradientTape`.

    The other arguments are :func:`DistributedGradientTape`'s.

    Raises:
        BadArgumentError: ``local_layers`` holds something that is not a Keras layer.

    Example::

        tape = hvd.PartialDistributedGradientTape(tape, local_layers=[model.layers[0]])
    """
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    layers = list(local_layers)
    bad = [layer for layer in layers if not isinstance(layer, tf.keras.layers.Layer)]
    if bad:
        raise BadArgumentError(f"local_layers should be Keras layers. Got: {bad[0]!r}")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set, scale_local_gradients)
    for layer in layers:
        for variable in layer.trainable_weights:
            tape.register_local_source(variable)
    return tape
