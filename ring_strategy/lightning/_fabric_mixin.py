"""Lightning Fabric on the ring engine: the methods of ``RingFabricStrategy``.

``Fabric(strategy="ring", devices=N)`` runs as the Trainer's strategy does:
``fabric.launch()`` in ``python train.py`` starts the other N-1 processes
(the script runs again in each, see :mod:`ring_strategy.lightning._spawn`),
and under ``ringrun``, ``torchrun``, ``mpirun`` or ``srun`` the launcher's
processes are used. The model is not wrapped: ``fabric.setup`` broadcasts
rank 0's parameters and buffers and gives the module a
:class:`~ring_strategy.torch.grad_sync.GradientSync`, whose hooks start the
average of each gradient during ``fabric.backward``; ``backward`` returns
with averaged gradients, as DDP's does. Inside
``fabric.no_backward_sync(model)`` gradients accumulate locally and the next
backward pass outside it averages their sum.

:class:`RingFabricStrategyMixin` holds the strategy without a Lightning base;
:mod:`ring_strategy.lightning.fabric` (``lightning_fabric``) and
:mod:`ring_strategy.lightning.lightning_fabric` (``lightning.fabric``) put it
on their package's ``ParallelStrategy``. Nothing here imports Lightning.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Union

import torch
from torch import Tensor

import ring_strategy.torch as _rt
from ring_strategy.environments.base import override
from ring_strategy.lightning._parallel import RingParallelMixin
from ring_strategy.torch.grad_sync import GradientSync

if TYPE_CHECKING:  # what type checkers see as the bases; at run time each package supplies its own
    from lightning_fabric.strategies.parallel import ParallelStrategy as _StrategyBase
    from lightning_fabric.strategies.strategy import _BackwardSyncControl as _SyncControlBase
else:
    _StrategyBase = _SyncControlBase = object

__all__ = ["RingBackwardSyncMixin", "RingFabricStrategyMixin"]


class RingBackwardSyncMixin(_SyncControlBase):
    """``fabric.no_backward_sync(model)``: the model's gradients accumulate locally inside."""

    def __init__(self, strategy: "RingFabricStrategyMixin") -> None:
        self._strategy = strategy

    @override
    def no_backward_sync(self, module: torch.nn.Module, enabled: bool) -> AbstractContextManager:
        if not enabled:
            return nullcontext()
        sync = self._strategy._syncs.get(id(module))
        if sync is None:
            if not self._strategy._active():
                return nullcontext()  # a world of one averages nothing
            raise TypeError(
                "RingFabricStrategy: no_backward_sync needs a module set up with fabric.setup(). "
                f"Got: {type(module).__name__}"
            )
        return sync.paused()


class RingFabricStrategyMixin(RingParallelMixin, _StrategyBase):
    """Data-parallel training with Lightning Fabric on the ring engine: ``Fabric(strategy="ring")``.

    ``import ring_strategy`` registers the name ``"ring"`` with Fabric.
    ``Fabric(strategy="ring", accelerator="cpu", devices=N)`` followed by
    ``fabric.launch()`` starts the other N-1 processes when the script runs
    as ``python train.py``; under ``ringrun -np N`` (or torchrun, mpirun,
    srun) the launcher's processes are used, with ``devices`` equal to the
    processes per host, or 1.

    ``fabric.backward(loss)`` returns with each parameter's gradient averaged
    over the ranks, for every module set up with ``fabric.setup`` that the
    pass reached (every rank must reach the same modules). Checkpoints
    (``fabric.save``) are written by rank 0 and read by every rank.

    Args:
        accelerator: The accelerator: the CPU, or CUDA GPUs (one process per GPU).
        parallel_devices: The devices of this host's processes.
        cluster_environment: Where this process sits in the job; a
            ``RingEnvironment`` by default.
        checkpoint_io: How checkpoints are written.
        precision: The precision plugin.

    Example:
        >>> import ring_strategy  # registers "ring"  # doctest: +SKIP
        >>> fabric = Fabric(strategy="ring", accelerator="cpu", devices=2)  # doctest: +SKIP
        >>> fabric.launch()  # doctest: +SKIP
    """

    strategy_name = "ring"
    _user_name = "RingFabricStrategy"
    _user_entry = "Fabric"
    # The launcher reads it; elastic fits are the Trainer's.
    elastic = False
    # What each Lightning package's subclass supplies.
    _environment_class: ClassVar[Callable[[], Any]]
    _launcher_class: ClassVar[Callable[[Any], Any]]
    _backward_sync_class: ClassVar[Callable[[Any], Any]]
    _cpu_accelerator: ClassVar[type]
    _cuda_accelerator: ClassVar[type]

    def __init__(
        self,
        accelerator: Optional[Any] = None,
        parallel_devices: Optional[List[torch.device]] = None,
        cluster_environment: Optional[Any] = None,
        checkpoint_io: Optional[Any] = None,
        precision: Optional[Any] = None,
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment or self._environment_class(),
            checkpoint_io=checkpoint_io,
            precision=precision,
        )
        self._num_nodes = 1
        # id(module) -> the GradientSync of each module set up, in set-up order.
        self._syncs: Dict[int, GradientSync] = {}
        self._backward_sync_control = self._backward_sync_class(self)

    # ------------------------------------------------------------ set-up
    def _set_world_ranks(self) -> None:
        """Fabric's name for :meth:`set_world_ranks`."""
        self.set_world_ranks()

    @override
    def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Gives every rank rank 0's parameters and buffers, and hooks the gradients' averaging.

        Returns:
            ``module`` itself (not wrapped).
        """
        if self.world_size > 1:
            _rt.broadcast_parameters(module.state_dict(), root_rank=0)
            if id(module) not in self._syncs:
                index = len(self._syncs)
                self._syncs[id(module)] = GradientSync(
                    lambda: ((f"ring.fabric.{index}.grad.{n}", p) for n, p in module.named_parameters()),
                )
        return module

    @override
    def module_to_device(self, module: torch.nn.Module) -> None:
        module.to(self.root_device)

    # ------------------------------------------------------------ gradients
    @override
    def backward(self, tensor: Tensor, module: Optional[torch.nn.Module], *args: Any, **kwargs: Any) -> None:
        """Runs the backward pass, then waits for the average of every gradient it computed.

        A module whose gradients this pass did not touch is left alone; one
        it touched has all its gradients averaged (zeros where a parameter
        got none). Outside ``no_backward_sync`` every pass averages, so
        passes without ``zero_grad`` between them sum averaged gradients,
        as with DDP.
        """
        syncs = list(self._syncs.values())
        for sync in syncs:
            sync.refresh()
        super().backward(tensor, module, *args, **kwargs)
        for sync in syncs:
            if sync.handles:
                try:
                    sync.synchronize()
                finally:
                    sync.restart()

    # ------------------------------------------------------------ collectives
    @override
    def all_reduce(
        self, tensor: Union[Tensor, Any], group: Optional[Any] = None, reduce_op: Optional[Union[Any, str]] = "mean"
    ) -> Union[Tensor, Any]:
        """Reduces ``tensor`` over all ranks (``fabric.all_reduce``).

        Args:
            tensor: The tensor; anything else is returned unchanged.
            group: None or torch.distributed's WORLD: every rank takes part.
            reduce_op: ``"mean"`` (default), ``"sum"``, ``"max"``, ``"min"``,
                ``"product"`` or the matching ``torch.distributed.ReduceOp``.

        Returns:
            The reduced tensor, on the input's device; the mean of an integer
            tensor is a float tensor.
        """
        return self._reduce(tensor, group, reduce_op, "RingFabricStrategy.all_reduce")

    # ------------------------------------------------------------ the end
    @override
    def teardown(self) -> None:
        for sync in self._syncs.values():
            sync.close()
        self._syncs.clear()
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("ring", cls, description="Data-parallel training on the ring allreduce engine",
                                   override=True)
