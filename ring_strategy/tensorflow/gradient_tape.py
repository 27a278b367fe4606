"""DistributedGradientTape: a tf.GradientTape whose gradients are averaged over all ranks."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import tensorflow as tf

from ring_strategy import ops as _np
from ring_strategy.basics import size
from ring_strategy.exceptions import BadArgumentError
from ring_strategy.tensorflow.compression import Compression
from ring_strategy.tensorflow.mpi_ops import (
    _do_not_convert,
    Average,
    ProcessSet,
    Sum,
    _check_op,
    _check_process_set,
    _op_name,
    allreduce,
    global_process_set,
    host_call,
)


class _DistributedGradientTape(tf.GradientTape):
    """Methods placed in front of the user's tape class; see :func:`DistributedGradientTape`."""

    @_do_not_convert
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        if size() == 1 and self._ring_compression is Compression.none:
            return grads
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, self._ring_allreduce(flat))

    def _ring_allreduce(self, grads: List[Any]) -> List[Any]:
        """Every gradient reduced over all ranks, the dense ones in one fused host call."""
        op, compression = self._ring_op, self._ring_compression
        n = size()
        if op == Average:
            # Horovod: sum of grad / predivide, then times predivide / size.
            prescale, postscale, wire_op = 1.0 / self._ring_predivide, self._ring_predivide / n, Sum
        else:
            prescale, postscale, wire_op = 1.0, 1.0, op
        out = list(grads)
        dense: List[int] = []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if self._ring_sparse_as_dense:
                    out[i] = g = tf.convert_to_tensor(g)
                else:
                    out[i] = allreduce(g, op=op, compression=compression)
                    continue
            dense.append(i)
        if not dense:
            return out
        wire, ctxs = [], []
        for i in dense:
            t, ctx = compression.compress(out[i])
            wire.append(t)
            ctxs.append(ctx)
        groups: Dict[tf.DType, List[int]] = {}
        for k, t in enumerate(wire):
            groups.setdefault(t.dtype, []).append(k)
        order = list(groups)
        flats = [tf.concat([tf.reshape(wire[k], [-1]) for k in groups[d]], 0) for d in order]
        name = _op_name("DistributedGradientTape", None)

        def reduce(arrays: List[np.ndarray]) -> List[np.ndarray]:
            handles = [_np.allreduce_async(a, wire_op, f"{name}.{d.name}", prescale, postscale)
                       for a, d in zip(arrays, order)]
            return [_np.synchronize(h) for h in handles]

        reduced = host_call(reduce, flats, order, [f.shape for f in flats], "RingDistributedGradientTape")
        for d, flat in zip(order, reduced):
            sizes = [tf.size(wire[k]) for k in groups[d]]
            pieces = tf.split(flat, sizes if len(sizes) > 1 else [tf.size(flat)], 0)
            for k, piece in zip(groups[d], pieces):
                out[dense[k]] = compression.decompress(tf.reshape(piece, tf.shape(wire[k])), ctxs[k])
                out[dense[k]].set_shape(wire[k].shape)
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
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        sparse_as_dense: reduce IndexedSlices gradients as dense tensors.
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, divide by this before the
            sum and by ``size() / factor`` after it.
        num_groups, groups: accepted for Horovod compatibility; every dense
            gradient is fused anyway.
        process_set: only the global set is supported.
        scale_local_gradients: accepted for Horovod compatibility.

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
    op = _check_op(op)
    if op not in (Average, Sum):
        raise BadArgumentError(f"op should be Average or Sum. Got: {op!r}")
    if not isinstance(gradient_predivide_factor, (int, float)) or gradient_predivide_factor <= 0:
        raise BadArgumentError(f"gradient_predivide_factor should be a positive float. Got: {gradient_predivide_factor!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise BadArgumentError(f"gradient_predivide_factor needs op=Average. Got: op={op!r}")
    _check_process_set(process_set)
    base = type(gradtape)
    cls = type(base.__name__, (_DistributedGradientTape, base), {"__module__": base.__module__})
    tape = object.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._ring_op = op
    tape._ring_compression = compression
    tape._ring_sparse_as_dense = bool(sparse_as_dense)
    tape._ring_predivide = float(gradient_predivide_factor)
    tape._ring_scale_local = bool(scale_local_gradients)
    return tape
