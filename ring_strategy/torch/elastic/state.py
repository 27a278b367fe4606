"""``TorchState``: a model, an optimizer, samplers, LR schedulers and plain
values kept in memory and rolled back together by the elastic loop.

Each value of a kind torch owns gets a handler that knows how to copy it
(``save``), put the copy back (``restore``), give every rank rank 0's
(``sync``) and adapt it to a new world (``reset``):

- ``torch.nn.Module``: a copy of ``state_dict()``; synced with
  ``broadcast_parameters``.
- ``torch.optim.Optimizer`` (a ``DistributedOptimizer`` too): a copy of
  ``state_dict()``; synced with ``broadcast_optimizer_state`` (and, with
  ``compression=PowerSGD(...)``, rank 0's step count and Qs).
- A sharded optimizer (``shard_optimizer_state=True``): a copy of its full
  ``state_dict()`` (gathered at each commit); a reset re-shards the commit
  for the new world, whatever its size; synced by broadcasting rank 0's.
- ``ElasticSampler``: its ``state_dict()`` (epoch, processed indices); a sync,
  and a change of hosts before the world ends, gathers every rank's
  processed indices; a reset splits the rest of the epoch over the new world.
- LR schedulers: a copy of ``state_dict()``; synced by broadcasting it.

Any other value is a plain attribute of :class:`ObjectState`.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple, Type

import torch

from ring_strategy.basics import rank
from ring_strategy.elastic.state import ObjectState
from ring_strategy.exceptions import RingError
from ring_strategy.torch.elastic.sampler import ElasticSampler
from ring_strategy.torch.sharded_optimizer import ShardedOptimizer
from ring_strategy.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)

__all__ = ["TorchState"]


class _Handler:
    """Keeps one value of the state; ``name`` names its collectives."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value
        self.save()

    def set_value(self, value: Any) -> None:
        """A new object in this place (``state.model = other``): it is the commit now."""
        self.value = value
        self.save()

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), 0, f"elastic.{self.name}"))

    def reset(self) -> None:
        """Adapts the value to the new world; nothing by default."""


class _ModuleHandler(_Handler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def restore(self) -> None:
        # A copy: torch's load_state_dict keeps the tensors it is given, which
        # the next steps change in place; the commit must stay as it was.
        try:
            self.value.load_state_dict(copy.deepcopy(self._saved))
        except RingError:
            # A DistributedOptimizer first finishes the lost world's reductions
            # still in flight: they fail, and are gone; now it loads.
            self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)
        # A compression with state of its own (PowerSGD's step count and Qs) takes rank 0's too.
        reducer = getattr(getattr(self.value, "_sync", None), "_reducer", None)
        if hasattr(reducer, "sync"):
            reducer.sync(0, f"elastic.{self.name}.compression")


class _ShardedOptimizerHandler(_Handler):
    """A sharded optimizer (``shard_optimizer_state=True``): each rank holds
    only its blocks of the state, so the commit is the full state, gathered
    (``save`` is a collective, as ``commit`` is). A restore is then possible
    onto any world: ``reset`` cuts the commit into the new world's blocks.

    No commit is taken when the handler is made (a worker that joins a
    running job makes its state while the others are not gathering); the
    run loop's first sync takes it.
    """

    def __init__(self, name: str, value: Any) -> None:  # noqa: D107 - no save here (see the class)
        self.name = name
        self.value = value
        self._saved: Optional[Dict[str, Any]] = None
        self._resets = 0

    def save(self) -> None:
        full = self.value.state_dict()
        # The gathered per-element tensors are fresh copies already; the rest is copied.
        fresh = {id(v): v for entries in full["state"].values() for v in entries.values()
                 if torch.is_tensor(v) and v.numel() > 1}
        self._saved = copy.deepcopy(full, fresh)

    def restore(self) -> None:
        if self._saved is not None:
            self.value.load_state_dict(self._saved)

    def reset(self) -> None:
        """Lays the state out for the new world, from the last commit."""
        self._resets += 1
        if self._saved is not None:
            self.value.reshard(self._saved)

    def sync(self) -> None:
        """Every rank takes rank 0's state: its commit after a reset (a worker
        that joined holds no part of the state), else the live state, gathered."""
        after_reset = broadcast_object(self._resets > 0, 0, f"elastic.{self.name}.after_reset")
        full = self._saved if after_reset else self.value.state_dict()
        self.value.load_state_dict(broadcast_object(full if rank() == 0 else None, 0, f"elastic.{self.name}"))


class _SamplerHandler(_Handler):
    def sync(self) -> None:
        state = self.value.state_dict()
        state["processed_indices"] = self._everyones_processed()
        self.value.load_state_dict(broadcast_object(state, 0, f"elastic.{self.name}"))

    def merge(self) -> None:
        """Every rank's processed indices, on every rank, in the sampler and its commit."""
        self.value.processed_indices = self._everyones_processed()
        self.save()

    def _everyones_processed(self) -> set:
        everyone = allgather_object(self.value.processed_indices, name=f"elastic.{self.name}.processed")
        return set().union(*everyone)

    def reset(self) -> None:
        self.value.reset()


def _scheduler_types() -> Tuple[type, ...]:
    schedulers = torch.optim.lr_scheduler
    base = getattr(schedulers, "LRScheduler", None) or schedulers._LRScheduler
    return (base, schedulers.ReduceLROnPlateau)


_HANDLERS: List[Tuple[Tuple[type, ...], Type[_Handler]]] = [
    ((torch.nn.Module,), _ModuleHandler),
    ((ShardedOptimizer,), _ShardedOptimizerHandler),  # before any optimizer: it is one
    ((torch.optim.Optimizer,), _OptimizerHandler),
    ((ElasticSampler,), _SamplerHandler),
    (_scheduler_types(), _Handler),
]


def _handler_for(name: str, value: Any) -> Optional[_Handler]:
    for types, handler in _HANDLERS:
        if isinstance(value, types):
            return handler(name, value)
    return None


class TorchState(ObjectState):
    """The elastic state of a PyTorch training script.

    ``save`` (``commit``) copies the model's and optimizer's ``state_dict()``
    and every other value in memory, ``restore`` loads the copies back in
    place, ``sync`` broadcasts rank 0's parameters, optimizer state, sampler
    progress and values to every rank (and keeps them as the commit).

    Args:
        model: A ``torch.nn.Module`` (or None).
        optimizer: A torch optimizer or ``DistributedOptimizer`` (or None).
        **kwargs: More values: modules, optimizers, ``ElasticSampler``\\ s,
            LR schedulers, or plain picklable values (``epoch=0``); each
            becomes an attribute of the state.

    Example::

        state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
        state.register_reset_callbacks([lambda: scale_lr(hvd.size())])
    """

    def __init__(self, model: Optional[torch.nn.Module] = None, optimizer: Optional[torch.optim.Optimizer] = None,
                 **kwargs: Any) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers: Dict[str, _Handler] = {}
        plain: Dict[str, Any] = {}
        for name, value in kwargs.items():
            handler = _handler_for(name, value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def __setattr__(self, name: str, value: Any) -> None:
        handler = self.__dict__.get("_handlers", {}).get(name)
        if handler is not None:
            handler.set_value(value)
        super().__setattr__(name, value)

    def save(self) -> None:
        self._each("save")
        super().save()

    def restore(self) -> None:
        self._each("restore")
        super().restore()

    def sync(self) -> None:
        self._each("sync", "save")
        super().sync()

    def reset(self) -> None:
        self._each("reset")
        super().reset()

    def merge_rank_local_changes(self) -> None:
        for handler in self._handlers.values():
            if isinstance(handler, _SamplerHandler):
                handler.merge()

    def _each(self, *methods: str) -> None:
        """Calls ``methods`` of every handler, handler by handler, in the order given."""
        for handler in self._handlers.values():
            for method in methods:
                getattr(handler, method)()
