"""LearningRateScheduleCallback: learning rate = initial_lr * multiplier(epoch)."""

from __future__ import annotations

from typing import Callable, Optional, Union

import keras

from keras_callbacks._util import check_bool, check_float, check_int, sync_jax_state


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the optimizer's learning rate to ``initial_lr * multiplier`` for
    the epochs in ``[start_epoch, end_epoch)``.

    With ``staircase=True`` the rate changes at the start of each epoch and
    ``multiplier(epoch)`` gets the integer epoch. With ``staircase=False`` it
    changes before every batch and gets a fractional epoch,
    ``epoch + batch / steps_per_epoch``. Outside the range the rate is left
    alone, so several of these callbacks can make up one schedule. It works
    on every Keras backend, inside compiled train steps (on JAX the trainer's
    state is synced before a change made within an epoch).

    Momentum correction (Goyal et al., 2017) scales the momentum by
    ``new_lr / old_lr`` for the batch in which the rate changes. Keras 3
    optimizers keep ``momentum`` as a Python number that a compiled step has
    already read, so the correction reaches only steps that are not compiled
    (``run_eagerly=True``, and the torch backend); elsewhere it is skipped.

    Args:
        initial_lr: the rate that ``multiplier`` scales (usually the
            single-worker rate times ``size()``).
        multiplier: a float, or a function of the epoch returning a float.
        start_epoch: first epoch (included) where the schedule applies. Default 0.
        end_epoch: epoch (excluded) where it stops; None: never. Default None.
        staircase: change the rate per epoch (True) or per batch (False).
        momentum_correction: scale the momentum along with a change of the rate.
        steps_per_epoch: batches per epoch, for ``staircase=False``; taken
            from ``fit`` when None.

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
        decay = hvd.LearningRateScheduleCallback(0.1, multiplier=lambda epoch: 0.5 ** epoch, start_epoch=1)
        model.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=3, verbose=0, callbacks=[decay])
    """

    def __init__(
        self,
        initial_lr: float,
        multiplier: Union[float, Callable[[float], float]],
        start_epoch: int = 0,
        end_epoch: Optional[int] = None,
        staircase: bool = True,
        momentum_correction: bool = True,
        steps_per_epoch: Optional[int] = None,
    ):
        super().__init__()
        self.initial_lr = check_float("initial_lr", initial_lr, allow_none=True)
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            constant = check_float("multiplier", multiplier)
            self.multiplier = lambda epoch: constant
        self.start_epoch = check_int("start_epoch", start_epoch)
        self.end_epoch = check_int("end_epoch", end_epoch, allow_none=True)
        if self.end_epoch is not None and self.end_epoch < self.start_epoch:
            raise ValueError(f"end_epoch should be >= start_epoch ({self.start_epoch}). Got: {end_epoch!r}")
        self.staircase = check_bool("staircase", staircase)
        self.momentum_correction = check_bool("momentum_correction", momentum_correction)
        self.steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, minimum=1, allow_none=True)
        self.current_epoch: Optional[int] = None
        self._restore_momentum: Optional[float] = None

    # ------------------------------------------------------------ helpers
    def _in_range(self, epoch: float) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _steps(self) -> int:
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        steps = (self.params or {}).get("steps")
        if not steps:
            raise ValueError(
                "steps_per_epoch is needed with staircase=False when fit() does not know the number of "
                f"steps per epoch. Got: steps_per_epoch={self.steps_per_epoch!r}"
            )
        return int(steps)

    def _compiled(self) -> bool:
        return keras.backend.backend() != "torch" and not getattr(self.model, "run_eagerly", False)

    def _adjust(self, epoch: float) -> None:
        optimizer = self.model.optimizer
        old_lr = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        sync_jax_state(self.model)
        optimizer.learning_rate = new_lr
        if (self.momentum_correction and old_lr > 0 and new_lr != old_lr and not self._compiled()
                and isinstance(getattr(optimizer, "momentum", None), (int, float)) and optimizer.momentum):
            self._restore_momentum = optimizer.momentum
            optimizer.momentum = optimizer.momentum * new_lr / old_lr

    # ------------------------------------------------------------ callbacks
    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._adjust(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or self.current_epoch is None:
            return
        epoch = self.current_epoch + batch / self._steps()
        if self._in_range(epoch):
            self._adjust(epoch)

    def on_train_batch_end(self, batch, logs=None):
        if self._restore_momentum is not None:
            self.model.optimizer.momentum = self._restore_momentum
            self._restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
