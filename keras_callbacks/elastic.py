"""Elastic training with Keras 3 (TensorFlow, JAX and torch backends), as
``horovod.keras.elastic``: ``KerasState``, the callbacks that commit it
during ``fit`` and keep its epoch and batch counters, and ``run``.

Example::

    import keras_callbacks as hvd

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=10),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(x, y, initial_epoch=state.epoch, epochs=epochs, callbacks=callbacks)

    train(state)
"""

from __future__ import annotations

from typing import Any, List, Optional

import keras
import numpy as np

from keras_callbacks._util import broadcast_variables, check_int, sync_jax_state
from ring_strategy.basics import rank
from ring_strategy.elastic.loop import run
from ring_strategy.elastic.state import ObjectState, broadcast_object

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]


class KerasState(ObjectState):
    """The elastic state of a Keras model: its variables, its optimizer's
    (momenta, iteration count) and plain values.

    ``save`` (``commit``) copies every variable to host memory, ``restore``
    assigns the copies back, ``sync`` broadcasts rank 0's variables and
    values (and keeps them as the commit).

    Args:
        model: A built Keras model.
        optimizer: Its optimizer; ``model.optimizer`` by default. Built
            here when it is not yet, so that its variables exist.
        backend: Accepted for Horovod compatibility; not used.
        **kwargs: Plain picklable values (``epoch=0, batch=0``), each an
            attribute of the state.

    Raises:
        ValueError: The model is not built.
    """

    def __init__(self, model: keras.Model, optimizer: Any = None, backend: Any = None, **kwargs: Any) -> None:
        if not model.built:
            raise ValueError("KerasState: the model must be built first (give it an Input, or call "
                             f"model.build(input_shape)). Got an unbuilt {type(model).__name__}")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(model.trainable_variables)
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self) -> None:
        self._save_model()
        super().save()

    def restore(self) -> None:
        for variable, value in zip(self._variables(), self._saved_model):
            variable.assign(value)
        super().restore()

    def sync(self) -> None:
        broadcast_variables(self._variables(), 0, "elastic.KerasState")
        self._save_model()
        super().sync()

    def _variables(self) -> List[Any]:
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables

    def _save_model(self) -> None:
        sync_jax_state(self.model)  # inside fit on JAX, the trainer holds the current values
        self._saved_model = [np.array(keras.ops.convert_to_numpy(v.value)) for v in self._variables()]


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state after every ``batches_per_commit`` training batches
    (and so raises ``HostsUpdatedInterrupt`` there when the hosts changed),
    counted across epochs and ``fit`` calls, and from the commit the state
    holds after a reset (on every rank of the new world alike).

    The commit is taken as the next batch begins, once every callback has
    seen the batches' end: the counters of :class:`UpdateBatchStateCallback`
    and :class:`UpdateEpochStateCallback` are committed up to date wherever
    this callback stands in the list. The batches after the last commit of
    a ``fit`` are committed by the next ``fit``'s first batch.

    Args:
        state: The elastic state.
        batches_per_commit: Batches between commits (default 1). A commit
            copies every variable to host memory and takes one small
            collective.
    """

    def __init__(self, state: ObjectState, batches_per_commit: int = 1) -> None:
        super().__init__()
        self.state = state
        self.batches_per_commit = check_int("batches_per_commit", batches_per_commit, minimum=1)
        self.batches_remaining = self.batches_per_commit
        state.register_reset_callbacks([self._count_from_the_commit])

    def _count_from_the_commit(self) -> None:
        """After a reset the state is a commit (the last one, rolled back to,
        or the one that saw new hosts): count ``batches_per_commit`` from
        there, as a rank that joins the new world does, so that every rank
        commits (a collective) at the same batch."""
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_begin(self, batch: int, logs: Optional[dict] = None) -> None:
        if self.batches_remaining <= 0:
            self.batches_remaining = self.batches_per_commit
            self.state.commit()

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        self.batches_remaining -= 1


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch``: the batches of the current epoch finished so
    far, counting those of a ``fit`` that a reset ended; 0 at the end of an
    epoch. A resumed epoch reports ``steps - state.batch`` steps in
    ``self.params`` (what ``fit`` runs is the data it is given).

    Args:
        state: The elastic state; it must have a ``batch`` attribute.
    """

    def __init__(self, state: ObjectState) -> None:
        super().__init__()
        self.state = state
        self._offset = 0
        self._steps_per_epoch: Optional[int] = None

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._offset = self.state.batch

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self.params and self.params.get("steps"):
            if self._steps_per_epoch is None:
                self._steps_per_epoch = self.params["steps"]
            self.params["steps"] = self._steps_per_epoch - self._offset

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        self.state.batch = self._offset + batch + 1

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        self.state.batch = 0
        self._offset = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch``: the epochs finished, whether ``fit`` starts
    counting at ``initial_epoch=state.epoch`` or at 0 (``epochs=epochs -
    state.epoch``), before and after resets.

    Args:
        state: The elastic state; it must have an ``epoch`` attribute.
    """

    def __init__(self, state: ObjectState) -> None:
        super().__init__()
        self.state = state
        self._offset: Optional[int] = None

    def on_train_begin(self, logs: Optional[dict] = None) -> None:
        self._offset = None

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        if self._offset is None:  # the first epoch of this fit is state.epoch, however fit numbers it
            self._offset = self.state.epoch - epoch

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        self.state.epoch = self._offset + epoch + 1
