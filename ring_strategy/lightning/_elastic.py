"""Elastic ``Trainer.fit`` for ``RingStrategy(elastic=True)``.

Design: a failure ends ``fit``; the strategy's launcher starts it again from
the last commit. A commit is Lightning's own checkpoint of the run (model,
optimizers, LR schedulers, loops with ``global_step`` and the epoch and
batch progress, callbacks, precision plugin), kept in memory, with the
training sampler's progress beside it. Starting ``fit`` again from it is
Lightning's resume from a checkpoint, so Lightning restores every part the
way it restores a file.

The loop is :func:`ring_strategy.elastic.run` with :class:`LightningState`
as its state, around one ``fit``:

- :meth:`LightningState.fit_once` runs ``fit`` (from the commit once there
  is one). A lost peer (``HorovodInternalError``) or ``HostsUpdatedInterrupt``
  out of it tears the Trainer down as Lightning does after an error (no
  ``on_exception`` hooks: the error is handled) and goes to the loop, which
  resets the world and syncs: rank 0's commit (the oldest survivor's) is
  broadcast to every rank, newcomers included. Any other error ends ``fit``
  as without elastic.
- The commit callback (:class:`ElasticCommitMixin`) commits once when
  training starts and then once ``commit_every_n_steps`` optimizer steps
  have passed since the last commit, at the end of the batch of the step
  (where ``ModelCheckpoint`` saves too), but not at the last batch of an
  epoch: Lightning resumes an epoch that ended only when the epoch has the
  same number of batches, which a new world changes. Each commit then
  checks, with one broadcast of rank 0's answer, whether the launcher
  announced new or lost hosts, so added workers join at the next commit.
- The training DataLoader's sampler is replaced by a :class:`FitSampler`
  (an ``ElasticSampler``) that records every trained batch; after a reset
  the rest of the epoch is split over the new world. The training
  DataLoader is built again every epoch
  (``reload_dataloaders_every_n_epochs=1`` while ``fit`` runs), so that
  Lightning counts each epoch's batches in the world that trains it.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from torch.utils.data import DistributedSampler

import ring_strategy.torch as _rt
from ring_strategy.elastic import ElasticSampler
from ring_strategy.elastic.loop import lost_a_peer
from ring_strategy.elastic.loop import run as elastic_run
from ring_strategy.elastic.state import State
from ring_strategy.exceptions import HostsUpdatedInterrupt
from ring_strategy.lightning._elastic_sampler import FitSampler

if TYPE_CHECKING:
    import pytorch_lightning as pl

__all__ = ["COMMIT_PATH", "ElasticCommitMixin", "LightningState", "check_commit_every"]

#: The ``ckpt_path`` under which ``fit`` restarts from the in-memory commit.
COMMIT_PATH = "ring-elastic://commit"
_MID_EPOCH_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"


def check_commit_every(steps: Any) -> int:
    """``commit_every_n_steps``, checked: a positive integer."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"RingStrategy: commit_every_n_steps should be a positive integer. Got: {steps!r}")
    return steps


class LightningState(State):
    """The elastic state of one ``fit``: the commit, and the training sampler.

    Args:
        commit_every_n_steps: Optimizer steps between two commits.
        callback_class: The commit callback (an :class:`ElasticCommitMixin`
            on the Lightning package's ``Callback``).
        update_dataloader: Lightning's ``_update_dataloader(dataloader, sampler)``.
    """

    def __init__(self, commit_every_n_steps: int, callback_class: Callable[["LightningState"], Any],
                 update_dataloader: Callable[[Any, Any], Any]) -> None:
        super().__init__(bcast_object=_rt.broadcast_object, get_rank=_rt.rank)
        self.commit_every_n_steps = check_commit_every(commit_every_n_steps)
        self._callback_class = callback_class
        self._update_dataloader = update_dataloader
        self._trainer: Optional["pl.Trainer"] = None
        self._commit: Optional[Dict[str, Any]] = None
        self._sampler: Optional[FitSampler] = None
        self._sampler_to_load: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------ the loop
    def fit(self, function: Callable[..., Any], args: Any, kwargs: Any, trainer: "pl.Trainer") -> Any:
        """Runs ``function`` (the Trainer's ``_fit_impl``) under the elastic loop."""
        bound = inspect.signature(function).bind(*args, **kwargs)
        callback = self._callback_class(self)
        reload_every = trainer.reload_dataloaders_every_n_epochs
        self._trainer, self._commit, self._sampler = trainer, None, None
        trainer.callbacks.append(callback)
        trainer.reload_dataloaders_every_n_epochs = 1
        try:
            _rt.init()
            return elastic_run(LightningState.fit_once)(self, function, bound)
        finally:
            trainer.reload_dataloaders_every_n_epochs = reload_every
            if callback in trainer.callbacks:
                trainer.callbacks.remove(callback)
            self._trainer = None

    def fit_once(self, function: Callable[..., Any], bound: inspect.BoundArguments) -> Any:
        """One ``fit``, from the commit when there is one; on a failure the
        elastic loop handles, the Trainer is torn down first."""
        trainer = self._trainer
        assert trainer is not None
        if self._commit is not None:
            bound.arguments["ckpt_path"] = COMMIT_PATH
            self._sampler_to_load = self._commit["sampler"]
        trainer.training = True  # a failure during validation left the stage there
        trainer.should_stop = False
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_MID_EPOCH_WARNING)  # the sampler resumes the epoch
                return function(*bound.args, **bound.kwargs)
        except Exception as e:
            if isinstance(e, HostsUpdatedInterrupt) or lost_a_peer(e):
                trainer._teardown()
                trainer.state.stage = None
                if trainer.lightning_module is not None:
                    trainer.lightning_module.train()  # a failure during validation left it in eval mode
            raise

    def load_commit(self) -> Dict[str, Any]:
        """A copy of the committed checkpoint (what ``fit`` loads from :data:`COMMIT_PATH`)."""
        if self._commit is None:
            raise ValueError(f"RingStrategy: there is no elastic commit to load from {COMMIT_PATH!r}")
        return copy.deepcopy(self._commit["checkpoint"])

    # ------------------------------------------------------------ State
    def save(self) -> None:
        trainer = self._trainer
        assert trainer is not None
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        sampler = None if self._sampler is None else self._sampler.state_dict()
        self._commit = copy.deepcopy({"checkpoint": checkpoint, "sampler": sampler, "step": trainer.global_step})

    def restore(self) -> None:
        """Nothing here: after every reset ``fit`` starts again from the commit."""

    def sync(self) -> None:
        self._commit = self._bcast_object(self._commit, 0, "ring.lightning.elastic.commit")

    # ------------------------------------------------------------ the callback's hooks
    def on_train_start(self) -> None:
        self._check_one_train_loader()
        if self._commit is None:
            self.save()

    def on_train_batch_end(self) -> None:
        trainer = self._trainer
        assert trainer is not None
        if self._sampler is not None:
            self._sampler.record_next_batch()
        assert self._commit is not None
        due = trainer.global_step - self._commit["step"] >= self.commit_every_n_steps
        if due and not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.commit()

    def _check_one_train_loader(self) -> None:
        loader = getattr(self._trainer.fit_loop, "_combined_loader", None) if self._trainer else None
        count = len(getattr(loader, "flattened", [])) if loader is not None else 0
        if count > 1:
            raise ValueError(f"RingStrategy(elastic=True) trains on one DataLoader. Got: {count} training DataLoaders")

    # ------------------------------------------------------------ data
    def process_train_dataloader(self, dataloader: Any) -> Any:
        """``dataloader`` with this fit's :class:`FitSampler` at the current epoch.

        Raises:
            ValueError: If its sampler is not a ``DistributedSampler`` (what
                Lightning puts there by default) or an ``ElasticSampler``.
        """
        sampler = getattr(dataloader, "sampler", None)
        batch_size = getattr(dataloader, "batch_size", None)
        if batch_size is None or not (type(sampler) is DistributedSampler or isinstance(sampler, ElasticSampler)):
            raise ValueError(
                "RingStrategy(elastic=True): the training DataLoader should have a batch_size and, as its "
                "sampler, the DistributedSampler Lightning puts there (Trainer(use_distributed_sampler=True), "
                "the default, with a sequential or random sampler) or a DistributedSampler or ElasticSampler "
                f"of your own. Got: sampler {type(sampler).__name__}, batch_size {batch_size!r}"
            )
        if self._sampler is None:
            self._sampler = FitSampler(dataloader.dataset, shuffle=bool(sampler.shuffle), seed=int(sampler.seed),
                                       batch_size=batch_size)
        if self._sampler_to_load is not None:
            self._sampler.load_state_dict(self._sampler_to_load)
            self._sampler_to_load = None
        self._sampler.dataset = dataloader.dataset
        assert self._trainer is not None
        self._sampler.set_epoch(self._trainer.current_epoch)
        return self._update_dataloader(dataloader, self._sampler)


class ElasticCommitMixin:
    """The callback that commits an elastic ``fit`` (see the module's docstring);
    each Lightning package puts it on its ``Callback``."""

    def __init__(self, state: LightningState) -> None:
        super().__init__()
        self._state = state

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._state.on_train_start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._state.on_train_batch_end()
