"""DistributedOptimizer for TensorFlow: ``tf.compat.v1.train`` optimizers
(graph-mode, TensorFlow 1-style scripts) and Keras optimizers.

A TF1 optimizer is wrapped in :class:`_DistributedOptimizer`, whose
``compute_gradients`` (and so ``minimize``) returns the gradients averaged
over all ranks; a Keras optimizer is wrapped by
:func:`keras_callbacks.DistributedOptimizer`.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import tensorflow as tf

from ring_strategy.exceptions import BadArgumentError
from ring_strategy.process_sets import ProcessSet, place_of, global_process_set
from ring_strategy.tensorflow.compression import Compression
from ring_strategy.tensorflow.gradient_aggregation import LocalGradientAggregation
from ring_strategy.tensorflow.gradient_tape import allreduce_gradients, check_gradient_reduction, source_key
from ring_strategy.tensorflow.mpi_ops import Average

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """A ``tf.compat.v1.train.Optimizer`` that averages the gradients of the
    wrapped optimizer over all ranks before they are applied.

    ``compute_gradients`` reduces every gradient in one fused host call (a
    stateful ``tf.numpy_function`` in the graph, run once per
    ``session.run``); ``apply_gradients``, the slots and ``variables()``
    are the wrapped optimizer's. Gradients of variables registered with
    :meth:`register_local_var` stay local (divided by ``size()`` when
    ``scale_local_gradients``). With ``backward_passes_per_step > 1``
    (graph mode only) the gradients are accumulated locally and reduced and
    applied once every that many runs (see
    :mod:`ring_strategy.tensorflow.gradient_aggregation`).
    """

    def __init__(self, optimizer: Any, name: Optional[str] = None, use_locking: bool = False,
                 compression: Any = Compression.none, sparse_as_dense: bool = False, op: int = Average,
                 gradient_predivide_factor: float = 1.0, scale_local_gradients: bool = True,
                 backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
                 process_set: ProcessSet = global_process_set):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._process_set = process_set
        self._optimizer = optimizer
        self._op = op
        self._compression = compression
        self._sparse_as_dense = bool(sparse_as_dense)
        self._predivide = float(gradient_predivide_factor)
        self._scale_local = bool(scale_local_gradients)
        self._local_vars: set = set()
        self._aggregation = None
        if backward_passes_per_step > 1:
            if tf.executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not supported for tf.compat.v1.train optimizers "
                                 f"with eager execution. Got: {backward_passes_per_step!r}")
            self._aggregation = LocalGradientAggregation(backward_passes_per_step, average_aggregated_gradients,
                                                         self.get_name())

    def register_local_var(self, var: tf.Variable) -> None:
        """Keeps ``var``'s gradient local to this rank (not reduced)."""
        self._local_vars.add(source_key(var))

    def compute_gradients(self, *args: Any, **kwargs: Any) -> List[Any]:
        """The wrapped optimizer's ``(gradient, variable)`` pairs, the
        gradients reduced over all ranks. Arguments as
        ``tf.compat.v1.train.Optimizer.compute_gradients``."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = [list(t) for t in zip(*pairs)]
        if self._aggregation is not None:
            grads = self._aggregation.compute(grads, lambda gs: self._reduce(gs, variables))
        else:
            grads = self._reduce(grads, variables)
        return list(zip(grads, variables))

    def _reduce(self, grads: List[Any], variables: List[Any]) -> List[Any]:
        """``grads`` reduced over the ranks, those of local variables kept (and scaled)."""
        if place_of(self._process_set).size == 1 and self._compression is Compression.none:
            return list(grads)
        local = [source_key(v) in self._local_vars for v in variables]
        return allreduce_gradients(list(grads), self._op, self._compression, self._sparse_as_dense, self._predivide,
                                   self._name, local, self._scale_local, self._process_set)

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None, name: Optional[str] = None) -> Any:
        """The wrapped optimizer's ``apply_gradients`` (with aggregation, on
        the communicating runs only)."""
        if self._aggregation is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
        grads_and_vars = list(grads_and_vars)
        return self._aggregation.apply(
            lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name),
            [g for g, _ in grads_and_vars])

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.variables(*args, **kwargs)


def _is_keras_optimizer(optimizer: Any) -> bool:
    keras = sys.modules.get("keras")  # a Keras optimizer exists only once keras was imported
    return keras is not None and isinstance(optimizer, keras.optimizers.Optimizer)


def DistributedOptimizer(optimizer: Any, name: Optional[str] = None, use_locking: bool = False,
                         device_dense: str = "", device_sparse: str = "", compression: Any = Compression.none,
                         sparse_as_dense: bool = False, backward_passes_per_step: int = 1, op: int = Average,
                         gradient_predivide_factor: float = 1.0, average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups: Any = None, process_set: ProcessSet = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """Wraps an optimizer so that gradients are averaged over all ranks.

    Args:
        optimizer: a ``tf.compat.v1.train.Optimizer`` (graph-mode scripts:
            ``minimize`` / ``compute_gradients`` in a ``tf.compat.v1.Session``)
            or a Keras optimizer (wrapped by ``keras_callbacks.DistributedOptimizer``).
        name: the wrapper's name (default ``"Distributed" + class name``).
        use_locking: passed to ``tf.compat.v1.train.Optimizer``.
        device_dense: accepted for Horovod compatibility (CPU only).
        device_sparse: as ``device_dense``.
        compression: ``Compression.none``, ``fp16`` or ``bf16``.
        sparse_as_dense: reduce IndexedSlices gradients as dense tensors.
        backward_passes_per_step: batches whose gradients are accumulated
            locally before one reduction and update (TF1 optimizers: graph
            mode only).
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, divide by this before the
            sum and by ``size() / factor`` after it (TF1 optimizers).
        average_aggregated_gradients: with ``backward_passes_per_step > 1``,
            apply the mean of the accumulated gradients, not their sum.
        num_groups: accepted for Horovod compatibility; every dense
            gradient is fused anyway.
        groups: as ``num_groups``.
        process_set: the ranks that average (default: every rank).
        scale_local_gradients: divide the gradients of variables registered
            with ``register_local_var`` by ``size()``.

    Returns:
        A ``tf.compat.v1.train.Optimizer``, or a Keras optimizer of the
        wrapped one's class.

    Example::

        import tensorflow as tf, ring_strategy.tensorflow as hvd
        tf.compat.v1.disable_eager_execution()
        hvd.init()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdagradOptimizer(0.01 * hvd.size()))
        train_op = opt.minimize(loss)
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    """
    op = check_gradient_reduction(op, gradient_predivide_factor, process_set)
    if isinstance(optimizer, _LegacyOptimizer):
        if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
                or backward_passes_per_step < 1:
            raise BadArgumentError(f"backward_passes_per_step should be an integer >= 1. Got: {backward_passes_per_step!r}")
        return _DistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense, op,
                                     gradient_predivide_factor, scale_local_gradients, backward_passes_per_step,
                                     bool(average_aggregated_gradients), process_set)
    if _is_keras_optimizer(optimizer):
        if gradient_predivide_factor != 1.0:
            raise BadArgumentError(
                f"gradient_predivide_factor is not supported for Keras optimizers. Got: {gradient_predivide_factor!r}")
        import keras_callbacks

        keras_compression = getattr(keras_callbacks.Compression, _compression_name(compression))
        return keras_callbacks.DistributedOptimizer(
            optimizer, name=name, compression=keras_compression, backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, op=op, process_set=process_set)
    raise BadArgumentError(
        f"optimizer should be a tf.compat.v1.train.Optimizer or a keras.optimizers.Optimizer. Got: {optimizer!r}")


def _compression_name(compression: Any) -> str:
    for name in ("none", "fp16", "bf16"):
        if compression is getattr(Compression, name):
            return name
    raise BadArgumentError(f"compression should be Compression.none, .fp16 or .bf16. Got: {compression!r}")
