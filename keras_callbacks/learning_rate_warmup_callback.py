"""LearningRateWarmupCallback: ramp the learning rate up from initial_lr / size()."""

from __future__ import annotations

from typing import Optional

from keras_callbacks._util import check_int, sync_jax_state
from keras_callbacks.learning_rate_schedule_callback import LearningRateScheduleCallback
from ring_strategy.basics import rank, size


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Gradual learning-rate warmup (Goyal et al., 2017, "Accurate, Large
    Minibatch SGD").

    A large global batch wants a learning rate ``size()`` times the
    single-worker one, but starting there often diverges. This callback starts
    at ``initial_lr / size()`` and raises the rate linearly, before every
    batch, and sets it to ``initial_lr`` at the end of epoch ``warmup_epochs``::

        lr(epoch) = initial_lr / size() * (epoch * (size() - 1) / warmup_epochs + 1)

    where ``epoch`` is fractional (``epoch + batch / steps_per_epoch``). From
    then on the rate is left alone, for another schedule to take over.

    Args:
        initial_lr: the rate reached at the end of warmup (usually the
            single-worker rate times ``size()``).
        warmup_epochs: epochs the warmup lasts. Default 5.
        momentum_correction: scale the momentum along with the rate (see
            :class:`LearningRateScheduleCallback` for where this applies).
        steps_per_epoch: batches per epoch; taken from ``fit`` when None.
        verbose: 1 prints a line on rank 0 when the warmup ends.

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
        model.compile(optimizer=opt, loss="mse")
        warmup = hvd.LearningRateWarmupCallback(0.01 * hvd.size(), warmup_epochs=2)
        model.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=3, verbose=0, callbacks=[warmup])
    """

    def __init__(
        self,
        initial_lr: float,
        warmup_epochs: int = 5,
        momentum_correction: bool = True,
        steps_per_epoch: Optional[int] = None,
        verbose: int = 0,
    ):
        self.warmup_epochs = check_int("warmup_epochs", warmup_epochs, minimum=1)
        self.verbose = check_int("verbose", verbose)

        def multiplier(epoch: float) -> float:
            n = size()
            return 1.0 / n * (epoch * (n - 1) / self.warmup_epochs + 1)

        super().__init__(
            initial_lr, multiplier, start_epoch=0, end_epoch=self.warmup_epochs, staircase=False,
            momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch,
        )

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.end_epoch - 1:
            # The last batch ran just below initial_lr; what follows starts at it.
            sync_jax_state(self.model)
            self.model.optimizer.learning_rate = self.initial_lr
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self.initial_lr:g}.")
