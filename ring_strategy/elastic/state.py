"""Training state that survives a change of the job's world.

:class:`State` is what the ``run`` loop (:mod:`ring_strategy.elastic.loop`)
drives: ``commit`` keeps a copy in memory and asks whether the hosts
changed, ``restore`` goes back to the last commit, ``sync`` makes every rank
hold rank 0's state, ``reset`` adapts to a new world. :class:`ObjectState`
keeps plain Python attributes that way; the framework front ends add
handlers for their models and optimizers on top of it.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Iterable, List

from ring_strategy import _objects
from ring_strategy.elastic import _world
from ring_strategy.exceptions import HostsUpdatedInterrupt

__all__ = ["State", "ObjectState", "broadcast_object"]


class State:
    """The state of an elastic training loop, kept in memory on every rank.

    Subclasses implement :meth:`save`, :meth:`restore` and :meth:`sync`, and
    may override :meth:`reset`.

    Args:
        bcast_object: ``bcast_object(obj)`` returning rank 0's ``obj`` on
            every rank (a front end's ``broadcast_object``, or
            :func:`broadcast_object`).
        get_rank: Returns this process's rank in the current world.
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: List[Callable[[], Any]] = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], Any]]) -> None:
        """Adds functions called, without arguments and in order, after every
        reset of the world (after :meth:`reset`, before the state is synced):
        the place to scale a learning rate by the new ``size()``, say."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Called by the ``run`` loop once the next world is formed:
        :meth:`reset`, then the registered callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state in memory (:meth:`save`), then raises
        ``HostsUpdatedInterrupt`` on every rank when the hosts changed
        (:meth:`check_host_updates`). Every rank must commit at the same
        points of training: the check is a collective."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt(skip_sync)`` on every rank when the
        launcher announced a change of hosts since this world began.

        Rank 0's answer is broadcast, so every rank decides the same way (a
        collective: every rank calls it at the same point).

        Raises:
            HostsUpdatedInterrupt: the hosts changed; ``skip_sync`` is True
                when workers were only removed.
        """
        updated, skip_sync = self._bcast_object(tuple(_world.host_updates()))
        if updated:
            self.merge_rank_local_changes()
            raise HostsUpdatedInterrupt(bool(skip_sync))

    def merge_rank_local_changes(self) -> None:
        """Called by :meth:`check_host_updates` on every rank together when
        the hosts changed, in the world that is ending (it may communicate):
        gives every rank, in the state and in its commit, what the ranks
        hold that the others lack (an ``ElasticSampler``'s
        ``record_indices``), so that a worker that leaves takes none of it
        with it and the members of the next world agree without a sync.
        Nothing by default."""

    def save(self) -> None:
        """Keeps a copy of the state in memory (the commit to go back to)."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Puts back the state of the last :meth:`save`; local, no communication."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Makes every rank's state rank 0's (a collective)."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Adapts the state to a new world (rank and size may have changed);
        local, no communication: a rank that joins the job later does not
        call it. Does nothing by default."""


class ObjectState(State):
    """Plain Python attributes kept as elastic state.

    Every keyword argument becomes an attribute. :meth:`save` keeps a deep
    copy (the object itself when it cannot be copied) of their current values, :meth:`restore` puts the copy back,
    :meth:`sync` gives every rank rank 0's current values
    (``bcast_object``) and keeps them as the commit.

    Args:
        bcast_object: See :class:`State`.
        get_rank: See :class:`State`.
        **kwargs: The attributes and their first values (picklable).

    Example::

        state = ObjectState(broadcast_object, rank, epoch=0, batch=0)
        state.epoch += 1
        state.commit()
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int], **kwargs: Any) -> None:
        self._saved_state: Dict[str, Any] = {name: _copy(value) for name, value in kwargs.items()}
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {name: _copy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            current = {name: getattr(self, name) for name in self._saved_state}
            synced = self._bcast_object(current)
            self._saved_state = {name: _copy(value) for name, value in synced.items()}
            self._set_attrs()

    def _set_attrs(self) -> None:
        for name, value in self._saved_state.items():
            setattr(self, name, _copy(value))


def _copy(value: Any) -> Any:
    """A deep copy of ``value``, or ``value`` itself when it cannot be copied."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - locks, handles, ...: kept by reference
        return value


def broadcast_object(obj: Any, root_rank: int = 0, name: str = "elastic.broadcast_object") -> Any:
    """``root_rank``'s ``obj`` on every rank of the world, for front ends
    without a ``broadcast_object`` of their own (Keras on any backend)."""
    from ring_strategy.process_sets import global_process_set

    return _objects.broadcast_object(obj, root_rank, name, global_process_set)
