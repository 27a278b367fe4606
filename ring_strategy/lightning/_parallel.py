"""What the Trainer's and Fabric's ring strategies share: the job's layout and the collectives.

:class:`RingParallelMixin` sits in front of a Lightning ``ParallelStrategy``
(the Trainer's, :mod:`ring_strategy.lightning._strategy_mixin`, or Fabric's,
:mod:`ring_strategy.lightning._fabric_mixin`); it reads ``parallel_devices``,
``cluster_environment``, ``accelerator``, ``local_rank``, ``global_rank`` and
``world_size`` from that base. Nothing here imports Lightning.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Optional, Union

import torch
from lightning_utilities.core.rank_zero import rank_zero_only
from torch import Tensor

import ring_strategy.torch as _rt
from ring_strategy.environments.base import override

__all__ = ["RingParallelMixin", "ring_op"]

_MEAN = ("mean", "avg", "average")
_OPS = {"sum": _rt.Sum, "max": _rt.Max, "min": _rt.Min, "product": _rt.Product, "prod": _rt.Product}


def ring_op(reduce_op: Any, where: str = "RingStrategy.reduce") -> int:
    """Maps Lightning's ``reduce_op`` (a string or ``torch.distributed.ReduceOp``) to an engine op.

    Args:
        reduce_op: ``"mean"`` (or None), ``"sum"``, ``"max"``, ``"min"``, ``"product"``, or a ``ReduceOp``.
        where: The method named in the error.

    Raises:
        ValueError: For any other operation, quoting it.
    """
    if reduce_op is None:
        return _rt.Average
    name = reduce_op if isinstance(reduce_op, str) else str(reduce_op).rpartition(".")[2]
    name = name.lower()
    if name in _MEAN:
        return _rt.Average
    if name in _OPS:
        return _OPS[name]
    raise ValueError(f"{where}: reduce_op should be 'mean', 'sum', 'max', 'min' or 'product'. Got: {reduce_op!r}")


def _world_group(group: Any) -> bool:
    """True for the groups that mean every rank: None, and torch.distributed's WORLD (what Fabric passes)."""
    if group is None:
        return True
    try:
        import torch.distributed as dist

        return dist.is_available() and group is dist.group.WORLD
    except (ImportError, AttributeError, RuntimeError):
        return False


class RingParallelMixin:
    """The layout of a ring job as Lightning sees it, and Lightning's collectives on the engine."""

    # The class name users see in errors, and the object they configure.
    _user_name: ClassVar[str] = "RingStrategy"
    _user_entry: ClassVar[str] = "Trainer"
    _num_nodes: int

    # ------------------------------------------------------------ layout
    @property
    def is_distributed(self) -> bool:
        """Always true: Lightning then injects a DistributedSampler."""
        return True

    @property
    @override
    def root_device(self) -> torch.device:
        """This process's device: its local rank's among the host's devices.
        With one device listed (``devices=1`` under ``ringrun -np N``, as with
        Horovod) a GPU process takes GPU ``local_rank`` modulo the GPUs it sees."""
        assert self.parallel_devices is not None
        devices = self.parallel_devices
        if len(devices) == 1 and devices[0].type == "cuda" and self.local_rank > 0:
            return torch.device("cuda", self.local_rank % max(1, torch.cuda.device_count()))
        return devices[min(self.local_rank, len(devices) - 1)]

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def num_processes(self) -> int:
        return len(self.parallel_devices) if self.parallel_devices is not None else 1

    @property
    @override
    def distributed_sampler_kwargs(self) -> Dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """Called by the Trainer (and, as ``_set_world_ranks``, by Fabric) once devices and num_nodes are known."""
        assert self.cluster_environment is not None
        self.cluster_environment.set_world_size(self.num_processes * self.num_nodes)
        self.cluster_environment.set_global_rank(self.node_rank * self.num_processes + self.local_rank)
        self._set_rank_zero_only()

    def _set_rank_zero_only(self) -> None:
        rank_zero_only.rank = self.global_rank  # type: ignore[attr-defined]

    def _check_accelerator(self) -> None:
        """Raises ValueError for devices or an accelerator other than the CPU and CUDA."""
        device_types = {d.type for d in (self.parallel_devices or [])}
        accelerator = type(self.accelerator).__name__ if self.accelerator is not None else ""
        known = (self._cpu_accelerator, self._cuda_accelerator)
        if device_types - {"cpu", "cuda"} or (accelerator and not isinstance(self.accelerator, known)):
            found = ", ".join(sorted(device_types)) or accelerator
            raise ValueError(
                f"{self._user_name} runs on CPUs and CUDA GPUs. "
                f"Got: accelerator={accelerator or None!r} with devices of type {found}; "
                f"use {self._user_entry}(accelerator='cpu') or {self._user_entry}(accelerator='gpu')"
            )

    def _init_engine(self) -> None:
        """Joins the engine's job and checks that it is the one Lightning expects."""
        _rt.init()
        self._set_rank_zero_only()
        if _rt.size() != self.world_size:
            raise RuntimeError(
                f"{self._user_name}: the engine's job has {_rt.size()} processes but Lightning expects "
                f"{self.world_size} (devices x num_nodes)"
            )

    @override
    def _configure_launcher(self) -> None:
        """The Trainer's and Fabric's launcher (``_launcher_class``), once the
        accelerator and the cluster's settings are checked."""
        self._check_accelerator()
        assert self.cluster_environment is not None
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        self._launcher = self._launcher_class(self)

    @override
    def setup_environment(self) -> None:
        self._init_engine()
        super().setup_environment()  # type: ignore[misc]  (Lightning's strategy, after this mixin)

    # ------------------------------------------------------------ collectives
    def _active(self) -> bool:
        return self.world_size > 1 and _rt.is_initialized()

    def _reduce(self, tensor: Union[Tensor, Any], group: Optional[Any], reduce_op: Any, where: str) -> Any:
        """Reduces ``tensor`` over all ranks; anything but a tensor is returned unchanged.

        The mean of an integer tensor is a float tensor, a bool tensor is
        reduced as int32; the result is on the input's device.
        """
        if not _world_group(group):
            raise ValueError(f"{where}: process groups are not supported. Got: group={group!r}")
        if not isinstance(tensor, Tensor):
            return tensor
        op = ring_op(reduce_op, where)
        if op == _rt.Average and not (tensor.is_floating_point() or tensor.is_complex()):
            tensor = tensor.float()
        elif tensor.dtype == torch.bool:
            tensor = tensor.to(torch.int32)
        if not self._active():
            return tensor
        return _rt.allreduce(tensor, op=op, name=None)

    @override
    def all_gather(self, tensor: Tensor, group: Optional[Any] = None, sync_grads: bool = False) -> Tensor:
        """Stacks every rank's ``tensor`` along a new first dimension: shape ``(world_size, *tensor.shape)``.

        With ``sync_grads`` the result carries gradients back to each rank's input.
        """
        if not _world_group(group):
            raise ValueError(f"{self._user_name}.all_gather: process groups are not supported. Got: group={group!r}")
        if not self._active():
            return tensor.unsqueeze(0)
        if sync_grads:
            return _rt.allgather(tensor.unsqueeze(0))
        with torch.no_grad():
            return _rt.allgather(tensor.detach().unsqueeze(0))

    @override
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` (any picklable object) on every rank."""
        if not self._active():
            return obj
        return _rt.broadcast_object(obj, root_rank=src, name="ring.lightning.broadcast")

    @override
    def barrier(self, name: Optional[str] = None) -> None:
        """Returns once every rank has called it."""
        if self._active():
            _rt.barrier()
