"""The methods of ``RingStrategy`` and of its launcher, for any Lightning package.

``pytorch_lightning`` and ``lightning.pytorch`` ship the same code under two
names, and their classes are distinct: a Trainer of one rejects a strategy
built on the other's base class. :class:`RingStrategyMixin` and
:class:`RingLauncherMixin` therefore hold the strategy without a Lightning
base; :mod:`ring_strategy.lightning.strategy` (``pytorch_lightning``) and
:mod:`ring_strategy.lightning.lightning_pytorch` (``lightning.pytorch``) each
put them in front of their package's ``ParallelStrategy`` and ``_Launcher``
and supply the few classes that differ between the packages (see
:class:`RingStrategyMixin`). Nothing here imports Lightning.

The strategy does not wrap the model. Every rank holds a full replica; a
:class:`~ring_strategy.torch.grad_sync.GradientSync` starts the average of
each gradient during backward, and :meth:`RingStrategyMixin.post_backward`
waits for them, so gradient clipping and ``on_before_optimizer_step`` already
see averaged gradients. Lightning blocks the sync on accumulation
micro-batches through :meth:`RingStrategyMixin.block_backward_sync`. A
parameter's gradient may be averaged once per optimizer step: a second
averaged backward pass before the step raises ``AssertionError`` on every
rank that runs it (see ``_TOO_MANY_PASSES``).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Generator, List, Optional, Union

import torch
from torch import Tensor

import ring_strategy.torch as _rt
from ring_strategy.environments.base import override
from ring_strategy.lightning import _spawn
from ring_strategy.lightning._elastic import COMMIT_PATH, LightningState, check_commit_every
from ring_strategy.lightning._environment import launcher_job
from ring_strategy.lightning._parallel import RingParallelMixin, ring_op
from ring_strategy.torch.grad_sync import GradientSync

if TYPE_CHECKING:  # what type checkers see as the bases; at run time each package supplies its own
    import pytorch_lightning as pl
    from pytorch_lightning.strategies.launchers.launcher import _Launcher as _LauncherBase
    from pytorch_lightning.strategies.parallel import ParallelStrategy as _StrategyBase
else:
    _LauncherBase = _StrategyBase = object

__all__ = ["RingLauncherMixin", "RingStrategyMixin", "ring_op"]

_TOO_MANY_PASSES = (
    "RingStrategy: a parameter's gradient was averaged in a second backward pass before the optimizer "
    "step; its .grad already held the average of the first one. To accumulate gradients over several "
    "backward passes, use Trainer(accumulate_grad_batches=N), or, in manual optimization, run every pass "
    "but the last inside `with self.trainer.strategy.block_backward_sync():` (or "
    "`with optimizer.toggle_model(sync_grad=False):`) so that only the last one is averaged."
)


class RingLauncherMixin(_LauncherBase):
    """Starts the other workers of a self-launched job (nothing under a launcher), then runs the function."""

    def __init__(self, strategy: "RingStrategyMixin") -> None:
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
            job = launcher_job()
            local = 1 if job is None else job.local_size
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
        if strategy.elastic and trainer is not None and trainer.state.fn == "fit":
            return strategy._elastic_state().fit(function, args, kwargs, trainer)
        return function(*args, **kwargs)

    @override
    def kill(self, signum: Any) -> None:
        _spawn.signal_workers(signum)


class RingStrategyMixin(RingParallelMixin, _StrategyBase):
    """Data-parallel training on the ring engine: ``Trainer(strategy="ring")``.

    ``import ring_strategy`` registers the name ``"ring"`` with Lightning. Run
    ``python train.py`` with ``Trainer(strategy="ring", accelerator="cpu",
    devices=N)`` and the first process starts the other N-1 itself; under
    ``ringrun -np N`` the launcher's processes are used instead.

    Args:
        accelerator: The accelerator: the CPU, or CUDA GPUs (one process per
            GPU; docs/gpu.md).
        parallel_devices: The devices of this host's processes.
        cluster_environment: Where this process sits in the job; a
            ``RingEnvironment`` by default.
        checkpoint_io: How checkpoints are written (by rank 0 only).
        precision_plugin: The precision plugin.
        elastic: Whether ``fit`` survives workers that leave and join (under
            ``ringrun``'s elastic options): a lost worker rolls training back
            to the last commit, the job re-forms, every rank takes rank 0's
            commit and ``fit`` goes on (see docs/elastic.md, "Lightning").
        commit_every_n_steps: With ``elastic``, optimizer steps between two
            in-memory commits (each also checks for added or removed hosts).
        shard_optimizer_state: Each rank keeps the optimizer state of 1/size
            of every parameter (ZeRO stages 1 and 2; see the PyTorch page):
            the optimizers' steps reduce-scatter the gradients, checkpoints
            hold the full state, which an elastic fit's commit holds too (a
            new world re-shards it). ``gradient_clip_val`` clips by the
            global norm (or value) of the averaged gradients.
        compression: How gradients travel: ``Compression.fp16`` or ``.bf16``
            (the dtype), or ``PowerSGD(rank=...)`` (low-rank with error
            feedback; see the PyTorch page). None: uncompressed.

    Example:
        >>> import ring_strategy  # registers "ring"  # doctest: +SKIP
        >>> trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2)  # doctest: +SKIP
    """

    strategy_name = "ring"
    # What each Lightning package's subclass supplies: its RingEnvironment and
    # launcher classes, its CPUAccelerator, and its fabric's
    # _optimizers_to_device.
    _environment_class: ClassVar[Callable[[], Any]]
    _launcher_class: ClassVar[Callable[[Any], Any]]
    _cpu_accelerator: ClassVar[type]
    _cuda_accelerator: ClassVar[type]
    _optimizers_to_device: ClassVar[Callable[[Any, torch.device], None]]
    # And, for elastic fits, its Callback with the commit hooks on it and
    # its _update_dataloader(dataloader, sampler).
    _elastic_callback_class: ClassVar[Callable[[Any], Any]]
    _update_dataloader: ClassVar[Callable[[Any, Any], Any]]
    # And its RingSyncBatchNorm, and the TorchSyncBatchNorm that
    # Trainer(sync_batchnorm=True) asks for (replaced by the former).
    _layer_sync_class: ClassVar[Callable[[], Any]]
    _torch_layer_sync_class: ClassVar[type]

    def __init__(
        self,
        accelerator: Optional["pl.accelerators.Accelerator"] = None,
        parallel_devices: Optional[List[torch.device]] = None,
        cluster_environment: Optional[Any] = None,
        checkpoint_io: Optional[Any] = None,
        precision_plugin: Optional[Any] = None,
        elastic: bool = False,
        commit_every_n_steps: int = 1,
        shard_optimizer_state: bool = False,
        compression: Any = None,
    ) -> None:
        if not isinstance(elastic, bool):
            raise ValueError(f"RingStrategy: elastic should be True or False. Got: {elastic!r}")
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment or self._environment_class(),
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )
        self._num_nodes = 1
        self._grad_sync: Optional[GradientSync] = None
        self.elastic = elastic
        if not isinstance(shard_optimizer_state, bool):
            raise ValueError("RingStrategy: shard_optimizer_state should be True or False. "
                             f"Got: shard_optimizer_state={shard_optimizer_state!r}")
        self.shard_optimizer_state = shard_optimizer_state
        if compression is not None and shard_optimizer_state:
            raise ValueError("RingStrategy: compression averages whole gradients; not with shard_optimizer_state=True. "
                             f"Got: compression={compression!r}")
        self.compression = _rt.Compression.none if compression is None else compression
        self.commit_every_n_steps = check_commit_every(commit_every_n_steps)
        self._elastic: Optional[LightningState] = None
        self._layers_synced = False

    def _elastic_state(self) -> LightningState:
        """The state of this strategy's elastic fits (made at the first)."""
        if self._elastic is None:
            self._elastic = LightningState(self.commit_every_n_steps, self._elastic_callback_class,
                                           self._update_dataloader)
        return self._elastic

    # ------------------------------------------------------------ set-up
    @override
    def setup(self, trainer: "pl.Trainer") -> None:
        assert self.accelerator is not None
        self.accelerator.setup(trainer)
        assert self.model is not None
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        fitting = trainer.state.fn == "fit"
        if fitting:
            self._sync_layers()
        self._check_same_settings(trainer)
        if self.world_size > 1:
            # Same start on every rank, buffers included (DDP does the same).
            _rt.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if fitting:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            self._optimizers_to_device(self.optimizers, self.root_device)
            if self.world_size > 1 and self.shard_optimizer_state:
                self._shard_optimizers(trainer)
            elif self.world_size > 1 and self._grad_sync is None:
                model = self.model
                make_reducer = getattr(self.compression, "make_reducer", None)  # PowerSGD's low-rank rounds
                self._grad_sync = GradientSync(
                    lambda: ((f"ring.lightning.grad.{n}", p) for n, p in model.named_parameters()),
                    too_many_passes=_TOO_MANY_PASSES, compression=self.compression,
                    reducer=None if make_reducer is None else make_reducer(),
                )

    def _shard_optimizers(self, trainer: "pl.Trainer") -> None:
        """Wraps every optimizer in the sharded optimizer (ZeRO stages 1 and 2,
        ring_strategy/torch/sharded_optimizer.py), which reduce-scatters the
        gradients in its step; no gradient is averaged during backward."""
        from ring_strategy.lightning._sharded_clip import clip_through_shards
        from ring_strategy.torch.sharded_optimizer import ShardedOptimizer, shard_optimizer

        clip_through_shards(self.precision_plugin)
        wrapped = []
        for number, optimizer in enumerate(self.optimizers):
            # Named by position: an elastic fit makes them again in every world, a joined worker once.
            sharded = optimizer if isinstance(optimizer, ShardedOptimizer) else \
                shard_optimizer(optimizer, name=f"ring.lightning.{number}")
            for config in self.lr_scheduler_configs:
                if getattr(config.scheduler, "optimizer", None) is optimizer:
                    config.scheduler.optimizer = sharded
            wrapped.append(sharded)
        self.optimizers = wrapped  # the setter wraps them in LightningOptimizers again

    def _sync_layers(self) -> None:
        """Applies the layer sync (``Trainer(sync_batchnorm=True)``) for a fit.

        Lightning's default plugin, ``TorchSyncBatchNorm``, would convert to
        ``torch.nn.SyncBatchNorm`` (torch.distributed); it is replaced by
        ``RingSyncBatchNorm``. Any other ``LayerSync`` plugin is applied as given.
        """
        if self._layer_sync is None:
            return
        if type(self._layer_sync) is self._torch_layer_sync_class:
            self._layer_sync = self._layer_sync_class()
        self.model = self._layer_sync.apply(self.model)
        self._layers_synced = True

    def _check_same_settings(self, trainer: "pl.Trainer") -> None:
        """Raises on every rank when the ranks' Trainers or models differ in what must agree."""
        if self.world_size == 1:
            return
        lm = self.lightning_module
        assert self.model is not None
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

    # ------------------------------------------------------------ elastic
    @override
    def load_checkpoint(self, checkpoint_path: Any, weights_only: Optional[bool] = None) -> Dict[str, Any]:
        """Loads a checkpoint; an elastic fit's restart loads its in-memory commit.

        ``weights_only`` is passed on only when given: Lightning 2.5.0 and older
        has no such parameter (and never passes it).
        """
        if self._elastic is not None and str(checkpoint_path) == COMMIT_PATH:
            return self._elastic.load_commit()
        if weights_only is None:
            return super().load_checkpoint(checkpoint_path)
        return super().load_checkpoint(checkpoint_path, weights_only=weights_only)

    @override
    def process_dataloader(self, dataloader: object) -> object:
        """Gives an elastic fit's training DataLoader its elastic sampler."""
        trainer = self.lightning_module.trainer if self.lightning_module is not None else None
        if self._elastic is not None and trainer is not None and trainer.training:
            return self._elastic.process_train_dataloader(dataloader)
        return dataloader

    # ------------------------------------------------------------ gradients
    @override
    def pre_backward(self, closure_loss: Tensor) -> None:
        if self._grad_sync is not None:
            self._grad_sync.refresh()

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        if self._grad_sync is not None:
            self._grad_sync.synchronize()

    @contextmanager
    @override
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Gradients accumulate locally inside this context (not the last micro-batch)."""
        if self._grad_sync is None:
            yield None
            return
        with self._grad_sync.paused():
            yield None

    @override
    def optimizer_step(
        self, optimizer: Any, closure: Callable[[], Any], model: Optional[Any] = None, **kwargs: Any
    ) -> Any:
        """Runs the optimizer step; every evaluation of ``closure`` (several
        for LBFGS) may average each gradient once."""
        sync = self._grad_sync
        if sync is None:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        sync.restart()  # the step ends the passes before it, manual ones included

        def evaluate() -> Any:
            sync.restart()
            return closure()

        return super().optimizer_step(optimizer, evaluate, model, **kwargs)

    # ------------------------------------------------------------ collectives
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
        return self._reduce(tensor, group, reduce_op, "RingStrategy.reduce")

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
            self._grad_sync.close()
            self._grad_sync = None
        if self._layers_synced and self._layer_sync is not None and self.model is not None:
            # As DDP does: after a fit the model has its own batch-norm layers back.
            self.model = self._layer_sync.revert(self.model)
        self._layers_synced = False
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(
            "ring", cls, description="Data-parallel training on the ring allreduce engine", override=True
        )
