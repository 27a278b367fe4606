"""Elastic training with TensorFlow 2 (eager, ``tf.function``), as
``horovod.tensorflow.elastic``: ``run``, ``TensorFlowKerasState`` (a
``tf.keras`` model, which is Keras 3: ``keras_callbacks.elastic.KerasState``)
and ``TensorFlowState`` (a list of ``tf.Variable``\\ s).

A lost peer inside a ``tf.function`` reaches the script as TensorFlow's
wrapping of ring's error; ``run`` recognises it as ``HorovodInternalError``.

Example::

    import ring_strategy.tensorflow as hvd

    @hvd.elastic.run
    def train(state):
        for state.step in range(state.step, steps):
            train_step()
            if state.step % 10 == 0:
                state.commit()

    train(hvd.elastic.TensorFlowState(variables=model.variables + opt.variables, step=0))
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import tensorflow as tf

from ring_strategy.basics import rank
from ring_strategy.elastic.loop import run
from ring_strategy.elastic.state import ObjectState
from ring_strategy.tensorflow.functions import broadcast_object, broadcast_variables

__all__ = ["run", "TensorFlowKerasState", "TensorFlowState"]


class TensorFlowState(ObjectState):
    """The elastic state of a TensorFlow 2 script: variables and plain values.

    ``save`` (``commit``) copies the variables to host memory, ``restore``
    assigns the copies back, ``sync`` broadcasts rank 0's variables and
    values (and keeps them as the commit).

    Args:
        variables: The ``tf.Variable``\\ s to keep (the model's and the
            optimizer's), the same list on every rank.
        session: Graph-mode (TensorFlow 1-style) sessions are not supported.
        **kwargs: Plain picklable values, each an attribute of the state.

    Raises:
        ValueError: No variables were given.
        NotImplementedError: A session was given.
    """

    def __init__(self, variables: Optional[Sequence[tf.Variable]] = None, session: Any = None, **kwargs: Any) -> None:
        if session is not None or not tf.executing_eagerly():
            raise NotImplementedError("TensorFlowState: graph-mode sessions are not supported; use TensorFlow 2 "
                                      "eager execution (tf.function is fine)")
        if not variables:
            raise ValueError(f"TensorFlowState: give the variables to keep (variables=[...]). Got: {variables!r}")
        self.variables = list(variables)
        self.session = session
        self._saved_variables = self._values()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self) -> None:
        self._saved_variables = self._values()
        super().save()

    def restore(self) -> None:
        for variable, value in zip(self.variables, self._saved_variables):
            variable.assign(value)
        super().restore()

    def sync(self) -> None:
        broadcast_variables(self.variables, root_rank=0)
        self._saved_variables = self._values()
        super().sync()

    def _values(self) -> list:
        return [v.numpy() for v in self.variables]


def __getattr__(name: str) -> Any:
    # TensorFlowKerasState is keras_callbacks.elastic.KerasState (tf.keras is
    # Keras 3); Keras is loaded on first use, not by importing this module.
    if name == "TensorFlowKerasState":
        from keras_callbacks.elastic import KerasState

        globals()[name] = KerasState
        return KerasState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
