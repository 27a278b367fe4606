"""RingStrategy and RingEnvironment for ``pytorch_lightning`` (with ``lightning_fabric``).

The strategy itself lives in :mod:`ring_strategy.lightning._strategy_mixin`
and :mod:`ring_strategy.lightning._environment`; this module puts it on
``pytorch_lightning``'s base classes. :mod:`ring_strategy.lightning.lightning_pytorch`
does the same for the unified ``lightning`` package.
"""

from __future__ import annotations

from lightning_fabric.utilities.optimizer import _optimizers_to_device
from pytorch_lightning.accelerators import CPUAccelerator, CUDAAccelerator
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
from pytorch_lightning.strategies.launchers.launcher import _Launcher
from pytorch_lightning.strategies.parallel import ParallelStrategy
from pytorch_lightning.utilities.data import _update_dataloader

from ring_strategy.lightning._elastic import ElasticCommitMixin
from ring_strategy.lightning._layer_sync import RingSyncBatchNormMixin
from ring_strategy.lightning._strategy_mixin import RingLauncherMixin, RingStrategyMixin
from ring_strategy.lightning.fabric import RingEnvironment

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
