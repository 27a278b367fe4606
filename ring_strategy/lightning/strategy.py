"""RingStrategy: ``Trainer(strategy="ring")`` on the ring engine.

Written against ``pytorch_lightning`` and ``lightning_fabric``; the module
:mod:`ring_strategy.lightning.lightning_pytorch` compiles this same source
against the unified ``lightning`` package (whose classes are distinct), so
both packages' Trainers accept it.

The strategy does not wrap the model. Every rank holds a full replica; a
post-accumulate-grad hook per parameter starts the average of its gradient
during backward (see :mod:`ring_strategy.lightning._grad_sync`), and
:meth:`RingStrategy.post_backward` waits for them, so gradient clipping and
``on_before_optimizer_step`` already see averaged gradients. Lightning blocks
the sync on accumulation micro-batches through :meth:`block_backward_sync`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Dict, Generator, List, Optional, Union

import torch
from torch import Tensor

import pytorch_lightning as pl
from lightning_fabric.plugins.environments.cluster_environment import ClusterEnvironment
from lightning_utilities.core.rank_zero import rank_zero_only as _utils_rank_zero_only
from pytorch_lightning.utilities.rank_zero import rank_zero_only
from pytorch_lightning.strategies.launchers.launcher import _Launcher
from pytorch_lightning.strategies.parallel import ParallelStrategy

import ring_strategy.torch as _rt
from ring_strategy.lightning import _spawn
from ring_strategy.environments import LocalEnvironment, detect_environment
from ring_strategy.environments import ClusterEnvironment as JobEnvironment
from ring_strategy.environments.base import override
from ring_strategy.lightning._grad_sync import GradientSync

__all__ = ["RingEnvironment", "RingStrategy"]



def _launcher() -> Optional[JobEnvironment]:
    """The job as the launcher that started this process describes it
    (ringrun, torchrun, mpirun, Slurm; see ring_strategy.environments), or
    None without one."""
    env = detect_environment()
    return None if isinstance(env, LocalEnvironment) else env


class RingEnvironment(ClusterEnvironment):
    """Lightning's view of a ring job, read from its launcher's variables.

    Under ``ringrun``, ``torchrun``, ``mpirun`` or ``srun`` (or in a worker
    that :class:`RingStrategy` started) the variables describe the job and
    the processes exist already. Before the first process of a self-launched
    job has started the others, the world size is whatever the strategy sets
    (``devices * num_nodes``) and this process is rank 0.
    """

    def __init__(self) -> None:
        super().__init__()
        self._world_size = 1
        self._global_rank = 0

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return _launcher() is not None

    def _rendezvous(self) -> str:
        job = _launcher()
        return (job.rendezvous_address if job is not None else None) or "127.0.0.1:0"

    @property
    @override
    def main_address(self) -> str:
        return self._rendezvous().rpartition(":")[0].strip("[]")

    @property
    @override
    def main_port(self) -> int:
        return int(self._rendezvous().rpartition(":")[2])

    @staticmethod
    @override
    def detect() -> bool:
        return _launcher() is not None

    @override
    def world_size(self) -> int:
        job = _launcher()
        return self._world_size if job is None else job.size

    @override
    def set_world_size(self, size: int) -> None:
        self._world_size = size

    @override
    def global_rank(self) -> int:
        job = _launcher()
        return self._global_rank if job is None else job.rank

    @override
    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    @override
    def local_rank(self) -> int:
        job = _launcher()
        return 0 if job is None else job.local_rank

    @override
    def node_rank(self) -> int:
        job = _launcher()
        return 0 if job is None else job.cross_rank

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Checks ``devices`` and ``num_nodes`` against the job.

        Under a launcher either ``devices`` equals the processes per host and
        ``num_nodes`` the hosts (as with DDP under torchrun), or both are 1
        (one device per process, as with Horovod). Without one, the first
        process starts ``devices`` workers on this host, so ``num_nodes`` must
        be 1 and ``devices`` at most the number of CPUs.
        """
        if num_devices < 1 or num_nodes < 1:
            raise ValueError(f"RingStrategy: devices and num_nodes should be positive. Got: {num_devices}, {num_nodes}")
        job = _launcher()
        if job is not None:
            size, local, hosts = job.size, job.local_size, job.cross_size
            if num_devices * num_nodes == 1 or (num_devices == local and num_nodes == hosts):
                return
            raise ValueError(
                f"RingStrategy: Trainer(devices={num_devices}, num_nodes={num_nodes}) does not match the "
                f"launcher's job of {size} processes ({local} per host on {hosts} host(s)): use "
                f"devices={local}, num_nodes={hosts}, or devices=1, num_nodes=1"
            )
        if num_nodes != 1:
            raise ValueError(
                f"RingStrategy: num_nodes={num_nodes} needs a launcher that starts the other hosts' "
                "processes: run the script with ringrun -H host1:N,host2:N ..."
            )
        cpus = os.cpu_count() or 1
        if num_devices > cpus:
            raise ValueError(
                f"RingStrategy: devices={num_devices} is more than the {cpus} CPUs of this host; "
                f"use at most devices={cpus}, or start the processes yourself with ringrun -np {num_devices}"
            )


class _RingLauncher(_Launcher):
    """Starts the other workers of a self-launched job (nothing under a launcher), then runs the function."""

    def __init__(self, strategy: "RingStrategy") -> None:
        self._strategy = strategy

    @property
    @override
    def is_interactive_compatible(self) -> bool:
        return False

    @override
    def launch(self, function: Any, *args: Any, trainer: Optional["pl.Trainer"] = None, **kwargs: Any) -> Any:
        strategy = self._strategy
        env = strategy.cluster_environment
        assert env is not None
        env.validate_settings(num_devices=strategy.num_processes, num_nodes=strategy.num_nodes)
        world = strategy.num_processes * strategy.num_nodes
        if not env.creates_processes_externally and world > 1:
            _spawn.start_workers(world)
        if "OMP_NUM_THREADS" not in os.environ:
            job = _launcher()
            local = 1 if job is None else job.local_size
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
        return function(*args, **kwargs)

    @override
    def kill(self, signum: Any) -> None:
        _spawn.signal_workers(signum)


_MEAN = ("mean", "avg", "average")
_OPS = {"sum": _rt.Sum, "max": _rt.Max, "min": _rt.Min, "product": _rt.Product, "prod": _rt.Product}


def _ring_op(reduce_op: Any) -> int:
    """Maps Lightning's ``reduce_op`` (a string or ``torch.distributed.ReduceOp``) to an engine op."""
    if reduce_op is None:
        return _rt.Average
    name = reduce_op if isinstance(reduce_op, str) else str(reduce_op).rpartition(".")[2]
    name = name.lower()
    if name in _MEAN:
        return _rt.Average
    if name in _OPS:
        return _OPS[name]
    raise ValueError(
        f"RingStrategy.reduce: reduce_op should be 'mean', 'sum', 'max', 'min' or 'product'. Got: {reduce_op!r}"
    )


class RingStrategy(ParallelStrategy):
    """Data-parallel training on the ring engine: ``Trainer(strategy="ring")``.

    ``import ring_strategy`` registers the name ``"ring"`` with Lightning. Run
    ``python train.py`` with ``Trainer(strategy="ring", accelerator="cpu",
    devices=N)`` and the first process starts the other N-1 itself; under
    ``ringrun -np N`` the launcher's processes are used instead.

    Args:
        accelerator: The accelerator; only the CPU is supported.
        parallel_devices: The devices of this host's processes.
        cluster_environment: Where this process sits in the job; a
            :class:`RingEnvironment` by default.
        checkpoint_io: How checkpoints are written (by rank 0 only).
        precision_plugin: The precision plugin.

    Example:
        >>> import ring_strategy  # registers "ring"  # doctest: +SKIP
        >>> trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2)  # doctest: +SKIP
    """

    strategy_name = "ring"

    def __init__(
        self,
        accelerator: Optional["pl.accelerators.Accelerator"] = None,
        parallel_devices: Optional[List[torch.device]] = None,
        cluster_environment: Optional[ClusterEnvironment] = None,
        checkpoint_io: Optional[Any] = None,
        precision_plugin: Optional[Any] = None,
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment or RingEnvironment(),
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )
        self._num_nodes = 1
        self._grad_sync: Optional[GradientSync] = None

    # ------------------------------------------------------------ layout
    @property
    def is_distributed(self) -> bool:
        """Always true: Lightning then injects a DistributedSampler."""
        return True

    @property
    @override
    def root_device(self) -> torch.device:
        assert self.parallel_devices is not None
        return self.parallel_devices[min(self.local_rank, len(self.parallel_devices) - 1)]

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
        """Called by the Trainer once devices and num_nodes are known."""
        assert self.cluster_environment is not None
        self.cluster_environment.set_world_size(self.num_processes * self.num_nodes)
        self.cluster_environment.set_global_rank(self.node_rank * self.num_processes + self.local_rank)
        self._set_rank_zero_only()

    def _set_rank_zero_only(self) -> None:
        rank_zero_only.rank = _utils_rank_zero_only.rank = self.global_rank

    @override
    def _configure_launcher(self) -> None:
        self._check_accelerator()
        assert self.cluster_environment is not None
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        self._launcher = _RingLauncher(self)

    def _check_accelerator(self) -> None:
        from pytorch_lightning.accelerators import CPUAccelerator

        device_types = {d.type for d in (self.parallel_devices or [])}
        accelerator = type(self.accelerator).__name__ if self.accelerator is not None else ""
        if device_types - {"cpu"} or (accelerator and not isinstance(self.accelerator, CPUAccelerator)):
            found = ", ".join(sorted(device_types)) or accelerator
            raise ValueError(
                f"RingStrategy runs on the CPU only: this build of ring has no GPU path. "
                f"Got: accelerator={accelerator or None!r} with devices of type {found}; "
                "use Trainer(accelerator='cpu')"
            )

    # ------------------------------------------------------------ set-up
    @override
    def setup_environment(self) -> None:
        _rt.init()
        self._set_rank_zero_only()
        if _rt.size() != self.world_size:
            raise RuntimeError(
                f"RingStrategy: the engine's job has {_rt.size()} processes but Lightning expects "
                f"{self.world_size} (devices x num_nodes)"
            )
        super().setup_environment()

    @override
    def setup(self, trainer: "pl.Trainer") -> None:
        assert self.accelerator is not None
        self.accelerator.setup(trainer)
        assert self.model is not None
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        self._check_same_settings(trainer)
        if self.world_size > 1:
            # Same start on every rank, buffers included (DDP does the same).
            _rt.broadcast_parameters(self.model.state_dict(), root_rank=0)
        fitting = trainer.state.fn == "fit"
        if fitting:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            from lightning_fabric.utilities.optimizer import _optimizers_to_device

            _optimizers_to_device(self.optimizers, self.root_device)
            if self.world_size > 1 and self._grad_sync is None:
                self._grad_sync = GradientSync(self.model)

    def _check_same_settings(self, trainer: "pl.Trainer") -> None:
        """Raises on every rank when the ranks' Trainers or models differ in what must agree."""
        if self.world_size == 1:
            return
        lm = self.lightning_module
        mine = {
            "world_size": self.world_size,
            "stage": str(trainer.state.fn),
            "max_epochs": trainer.max_epochs,
            "max_steps": trainer.max_steps,
            "accumulate_grad_batches": trainer.accumulate_grad_batches,
            "gradient_clip_val": trainer.gradient_clip_val,
            "precision": str(self.precision_plugin.__class__.__name__),
            "automatic_optimization": getattr(lm, "automatic_optimization", None),
            "parameters": [(n, tuple(p.shape), str(p.dtype), p.requires_grad) for n, p in self.model.named_parameters()],
        }
        every = _rt.allgather_object(mine, name="ring.lightning.settings")
        differ = sorted(k for k in mine if any(other[k] != every[0][k] for other in every))
        if differ:
            details = "; ".join(
                f"{k}: " + ", ".join(f"rank {r}={every[r][k]!r}" for r in range(len(every)))
                for k in differ if k != "parameters"
            )
            if "parameters" in differ:
                details = (details + "; " if details else "") + "the model's parameters (names, shapes, dtypes) differ"
            raise RuntimeError(f"RingStrategy: the ranks' Trainer settings differ: {details}")

    @override
    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    # ------------------------------------------------------------ gradients
    @override
    def pre_backward(self, closure_loss: Tensor) -> None:
        if self._grad_sync is not None:
            self._grad_sync.refresh()

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        if self._grad_sync is not None:
            self._grad_sync.wait()

    @contextmanager
    @override
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Gradients accumulate locally inside this context (not the last micro-batch)."""
        sync = self._grad_sync
        if sync is None:
            yield None
            return
        before, sync.enabled = sync.enabled, False
        try:
            yield None
        finally:
            sync.enabled = before

    # ------------------------------------------------------------ collectives
    def _active(self) -> bool:
        return self.world_size > 1 and _rt.is_initialized()

    @override
    def reduce(
        self, tensor: Union[Tensor, Any], group: Optional[Any] = None, reduce_op: Optional[Union[Any, str]] = "mean"
    ) -> Union[Tensor, Any]:
        """Reduces ``tensor`` over all ranks (``self.log(..., sync_dist=True)`` uses this).

        Args:
            tensor: The tensor; anything else is returned unchanged.
            group: Not supported (must be None): every rank takes part.
            reduce_op: ``"mean"`` (default), ``"sum"``, ``"max"``, ``"min"``,
                ``"product"`` or the matching ``torch.distributed.ReduceOp``.

        Returns:
            The reduced tensor, on the input's device; the mean of an integer
            tensor is a float tensor.
        """
        if group is not None:
            raise ValueError(f"RingStrategy.reduce: process groups are not supported. Got: group={group!r}")
        if not isinstance(tensor, Tensor):
            return tensor
        op = _ring_op(reduce_op)
        if op == _rt.Average and not (tensor.is_floating_point() or tensor.is_complex()):
            tensor = tensor.float()
        elif tensor.dtype == torch.bool:
            tensor = tensor.to(torch.int32)
        if not self._active():
            return tensor
        return _rt.allreduce(tensor, op=op, name=None)

    @override
    def all_gather(self, tensor: Tensor, group: Optional[Any] = None, sync_grads: bool = False) -> Tensor:
        """Stacks every rank's ``tensor`` along a new first dimension: shape ``(world_size, *tensor.shape)``."""
        if group is not None:
            raise ValueError(f"RingStrategy.all_gather: process groups are not supported. Got: group={group!r}")
        if not self._active():
            return tensor.unsqueeze(0)
        if sync_grads:
            return _rt.allgather(tensor.unsqueeze(0))
        with torch.no_grad():
            return _rt.allgather(tensor.detach().unsqueeze(0))

    @override
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self._active():
            return obj
        return _rt.broadcast_object(obj, root_rank=src, name="ring.lightning.broadcast")

    @override
    def barrier(self, name: Optional[str] = None) -> None:
        if self._active():
            _rt.barrier()

    # ------------------------------------------------------------ the end
    @override
    def on_exception(self, exception: BaseException) -> None:
        # Ends the job on every rank, so that peers waiting in a collective
        # for this one fail instead of hanging.
        if self.world_size > 1 and _rt.is_initialized():
            _rt.shutdown()

    @override
    def teardown(self) -> None:
        if self._grad_sync is not None:
            self._grad_sync.remove()
            self._grad_sync = None
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(
            "ring", cls, description="Data-parallel training on the ring allreduce engine", override=True
        )
