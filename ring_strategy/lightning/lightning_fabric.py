"""RingFabricStrategy and RingEnvironment for the unified ``lightning`` package (``lightning.fabric``).

``lightning.fabric`` and ``lightning_fabric`` ship the same code under two
names, and their classes are distinct; this module puts the strategy of
:mod:`ring_strategy.lightning._fabric_mixin` on ``lightning.fabric``'s base
classes, as :mod:`ring_strategy.lightning.fabric` does on ``lightning_fabric``'s.
Importing it imports ``lightning.fabric``.
"""

from __future__ import annotations

from lightning.fabric.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.fabric.plugins.environments.cluster_environment import ClusterEnvironment
from lightning.fabric.strategies.launchers.launcher import _Launcher
from lightning.fabric.strategies.parallel import ParallelStrategy
from lightning.fabric.strategies.strategy import _BackwardSyncControl

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
