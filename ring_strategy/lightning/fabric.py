"""RingFabricStrategy and RingEnvironment for ``lightning_fabric``: ``Fabric(strategy="ring")``.

The strategy lives in :mod:`ring_strategy.lightning._fabric_mixin` and
:mod:`ring_strategy.lightning._environment`; this module puts it on
``lightning_fabric``'s base classes (:mod:`ring_strategy.lightning.lightning_fabric`
does the same for the unified ``lightning`` package's ``lightning.fabric``).
Importing it imports ``lightning_fabric`` only, not the Trainer's package.
"""

from __future__ import annotations

from lightning_fabric.accelerators import CPUAccelerator, CUDAAccelerator
from lightning_fabric.plugins.environments.cluster_environment import ClusterEnvironment
from lightning_fabric.strategies.launchers.launcher import _Launcher
from lightning_fabric.strategies.parallel import ParallelStrategy
from lightning_fabric.strategies.strategy import _BackwardSyncControl

from ring_strategy.lightning._environment import RingEnvironmentMixin
from ring_strategy.lightning._fabric_mixin import RingBackwardSyncMixin, RingFabricStrategyMixin
from ring_strategy.lightning._strategy_mixin import RingLauncherMixin

__all__ = ["RingEnvironment", "RingFabricStrategy"]


class RingEnvironment(RingEnvironmentMixin, ClusterEnvironment):
    __doc__ = RingEnvironmentMixin.__doc__


class _RingLauncher(RingLauncherMixin, _Launcher):
    __doc__ = RingLauncherMixin.__doc__


class _RingBackwardSync(RingBackwardSyncMixin, _BackwardSyncControl):
    __doc__ = RingBackwardSyncMixin.__doc__


class RingFabricStrategy(RingFabricStrategyMixin, ParallelStrategy):
    __doc__ = RingFabricStrategyMixin.__doc__
    _environment_class = RingEnvironment
    _launcher_class = _RingLauncher
    _backward_sync_class = _RingBackwardSync
    _cpu_accelerator = CPUAccelerator
    _cuda_accelerator = CUDAAccelerator
