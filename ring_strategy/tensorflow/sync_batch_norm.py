"""SyncBatchNormalization: a Keras batch normalization layer whose training
statistics span every rank's batch (TensorFlow backend)."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import tensorflow as tf

from ring_strategy._batch_stats import global_moments
from ring_strategy.basics import size
from ring_strategy.tensorflow.mpi_ops import Sum, allreduce

__all__ = ["SyncBatchNormalization"]


@tf.keras.utils.register_keras_serializable(package="ring")
class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """Batch normalization over the global batch of all ranks.

    A drop-in replacement for ``tf.keras.layers.BatchNormalization`` (Keras 3
    on the TensorFlow backend). In training mode (``training=True``, as
    ``model.fit`` calls it) the per-channel mean and biased variance come from
    the concatenation of every rank's batch, which may differ in size between
    ranks; a mask (``mask=``) leaves its masked rows out on every rank. The
    moving statistics are updated with these global values, so they stay the
    same on every rank. Gradients flow through the reduction (its gradient is
    the Sum allreduce of the incoming gradient), so the backward pass is that
    of batch normalization on the global batch. In inference mode it
    normalizes locally with the moving statistics, like the base layer.
    Works eagerly and inside ``tf.function`` (``model.fit``), not under XLA
    (``jit_compile=True``).

    Every rank must call the layer the same number of times, in the same
    order (each training call is one allreduce in the forward pass and one in
    the backward pass). A saved model loads it again without
    ``custom_objects`` once ``ring_strategy.tensorflow`` is imported.

    Args:
        fused: accepted as Horovod's layer accepts it; only False (the
            default) or None is valid.
        **kwargs: the arguments of ``tf.keras.layers.BatchNormalization``
            (``axis``, ``momentum``, ``epsilon``, ``center``, ``scale``, ...).

    Raises:
        ValueError: for ``fused=True``.

    Example::

        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16),
                                     hvd.SyncBatchNormalization(), tf.keras.layers.ReLU()])
    """

    def __init__(self, fused: Optional[bool] = False, **kwargs: Any) -> None:
        if fused:
            raise ValueError(f"SyncBatchNormalization does not support fused=True. Got: fused={fused!r}")
        super().__init__(**kwargs)

    def _moments(self, inputs: tf.Tensor, mask: Optional[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
        if size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        channels = inputs.shape[self.axis]
        x = tf.cast(inputs, tf.float64)
        if mask is None:
            weights = tf.ones_like(x)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)), tf.float64)
        # Each channel counts the same rows: the total weight over channels.
        count = tf.reduce_sum(weights) / channels
        local = tf.concat([tf.reduce_sum(x * weights, axes), tf.reduce_sum(x * x * weights, axes),
                           tf.reshape(count, [1])], 0)
        mean, variance, _ = global_moments(allreduce(local, op=Sum), channels)
        return tf.cast(mean, inputs.dtype), tf.cast(tf.maximum(variance, 0.0), inputs.dtype)
