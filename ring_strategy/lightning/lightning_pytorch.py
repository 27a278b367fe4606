"""RingStrategy and RingEnvironment for the unified ``lightning`` package (``lightning.pytorch``).

``lightning.pytorch`` and ``pytorch_lightning`` ship the same code under two
names, and their classes are distinct: a Trainer of one rejects a strategy
built on the other's base classes. This module puts the strategy of
:mod:`ring_strategy.lightning._strategy_mixin` and
:mod:`ring_strategy.lightning._environment` on ``lightning.pytorch``'s base
classes, as :mod:`ring_strategy.lightning.strategy` does on
``pytorch_lightning``'s. Importing it imports ``lightning``.
"""

from __future__ import annotations

from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
from lightning.pytorch.strategies.launchers.launcher import _Launcher
from lightning.pytorch.strategies.parallel import ParallelStrategy
from lightning.pytorch.utilities.data import _update_dataloader

from ring_strategy.lightning._elastic import ElasticCommitMixin
from ring_strategy.lightning._layer_sync import RingSyncBatchNormMixin
from ring_strategy.lightning._strategy_mixin import RingLauncherMixin, RingStrategyMixin
from ring_strategy.lightning.lightning_fabric import RingEnvironment

__all__ = ["RingEnvironment", "RingStrategy", "RingSyncBatchNorm"]


class _RingLauncher(RingLauncherMixin, _Launcher):
    __doc__ = RingLauncherMixin.__doc__


class _ElasticCommit(ElasticCommitMixin, Callback):
    __doc__ = ElasticCommitMixin.__doc__


class RingSyncBatchNorm(RingSyncBatchNormMixin, LayerSync):
    __doc__ = RingSyncBatchNormMixin.__doc__


class RingStrategy(RingStrategyMixin, ParallelStrategy):
    __doc__ = RingStrategyMixin.__doc__
    _environment_class = RingEnvironment
    _launcher_class = _RingLauncher
    _cpu_accelerator = CPUAccelerator
    _cuda_accelerator = CUDAAccelerator
    _optimizers_to_device = staticmethod(_optimizers_to_device)
    _elastic_callback_class = _ElasticCommit
    _update_dataloader = staticmethod(_update_dataloader)
    _layer_sync_class = RingSyncBatchNorm
    _torch_layer_sync_class = TorchSyncBatchNorm
