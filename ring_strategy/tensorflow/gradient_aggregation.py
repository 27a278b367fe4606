"""Local gradient aggregation for graph-mode ``tf.compat.v1.train``
optimizers: ``backward_passes_per_step`` batches are accumulated on each rank
before one reduction over the ranks and one update.

Each ``session.run`` of the training op adds the local gradients to
accumulators (local variables, never broadcast) and counts; on every
``backward_passes_per_step``-th run the accumulated gradients (their sum, or
their mean with ``average_aggregated_gradients``) are reduced over the ranks,
the accumulators and the counter are reset, and the wrapped optimizer applies
the result. On the other runs nothing is communicated or applied (the global
step, if any, still advances). Every rank counts alike, so all take the
communicating branch on the same run.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import tensorflow as tf

_LOCAL = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]


class LocalGradientAggregation:
    """The accumulators and the counter of one optimizer, in one graph."""

    def __init__(self, steps: int, average: bool, name: str):
        self.steps = steps
        self.average = average
        self.name = name
        self.counter: Optional[tf.Variable] = None
        self.sums: List[Optional[tf.Variable]] = []

    def _create(self, grads: List[Any]) -> None:
        with tf.compat.v1.variable_scope(self.name + "_aggregation", reuse=tf.compat.v1.AUTO_REUSE):
            self.counter = tf.compat.v1.get_variable("counter", shape=[], dtype=tf.int32, trainable=False,
                                                     initializer=tf.compat.v1.zeros_initializer(), collections=_LOCAL)
            self.sums = [None if g is None else tf.compat.v1.get_variable(
                f"sum_{i}", shape=g.shape, dtype=g.dtype, trainable=False,
                initializer=tf.compat.v1.zeros_initializer(), collections=_LOCAL) for i, g in enumerate(grads)]

    def compute(self, grads: List[Any], reduce: Callable[[List[Any]], List[Any]]) -> List[Any]:
        """The gradients to apply: ``reduce`` of the accumulated gradients on
        a communicating run, zeros (not applied) on the others. ``reduce``
        takes and returns a list aligned with ``grads`` (None where a
        gradient is None)."""
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        if self.counter is None:
            self._create(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        adds = [self.sums[i].assign_add(grads[i]) for i in present]
        with tf.control_dependencies(adds):
            count = self.counter.assign_add(1)

        def communicate():
            values = [self.sums[i].read_value() for i in present]
            if self.average:
                values = [v / tf.cast(self.steps, v.dtype) for v in values]
            aligned: List[Any] = [None] * len(grads)
            for i, v in zip(present, values):
                aligned[i] = v
            reduced = [r for r in reduce(aligned) if r is not None]
            with tf.control_dependencies(reduced):
                resets = [self.sums[i].assign(tf.zeros_like(self.sums[i])) for i in present]
                resets.append(self.counter.assign(0))
            with tf.control_dependencies(resets):
                return [tf.identity(r) for r in reduced]

        def accumulate():
            return [tf.zeros_like(self.sums[i]) for i in present]

        chosen = tf.cond(tf.equal(count, self.steps), communicate, accumulate) if present else []
        out: List[Any] = [None] * len(grads)
        for i, g in zip(present, chosen):
            out[i] = g
        return out

    def apply(self, apply_fn: Callable[[], Any], grads: List[Any]) -> tf.Operation:
        """``apply_fn()`` on a communicating run (the counter back at 0), else
        only the global step's increment."""

        def skip():
            step = tf.compat.v1.train.get_global_step()
            return tf.no_op() if step is None else step.assign_add(1, read_value=False)

        with tf.control_dependencies([g for g in grads if g is not None]):
            return tf.cond(tf.equal(self.counter, 0), apply_fn, skip)
