"""Process sets, as in Horovod: the ranks a collective runs on.

Every front end takes ``process_set=`` on its collectives; the set must be
registered on every rank, with the same ranks, before any rank uses it:

- statically, ``init(process_sets=[ProcessSet([0, 1]), [2, 3]])``: ids 1, 2, ...
  in list order;
- dynamically, with ``RING_DYNAMIC_PROCESS_SETS=1`` (or
  ``HOROVOD_DYNAMIC_PROCESS_SETS``) or ``init(process_sets="dynamic")``:
  ``add_process_set(ranks)`` and ``remove_process_set(ps)`` are collective:
  every rank calls them, in the same order, with the same ranks.

The ranks check every registration together: when they disagree (different
ranks, a set that exists already, operations of a removed set that never
finish), every rank raises ``BadArgumentError`` and nothing changes.

Rank 0 negotiates the operations of every set, so its engine must know a set
from before any rank can submit on it until after every rank is done with
it. Adding registers the set in each rank's engine before the ranks agree
(no rank returns before rank 0 has it); removing first waits for this rank's
own operations of the set, then has the ranks agree, and only then drops the
set from the engines (no request of it can still reach rank 0).

Each set is its own ring in the engine (native/engine/process_sets.h). A
broadcast's ``root_rank`` is a global rank that belongs to the set; results
of allgather, alltoall and reducescatter are laid out by the set's ranks in
ascending order.

Registrations belong to a world: ``shutdown()`` forgets them and a later
``init()`` starts with the global set only.

The sets live in the core (:mod:`ring_strategy._core.registry`); front ends
check a ``process_set=`` argument with :func:`place_of`, which also gives the
engine's id of the set and this rank's place in it (``SetPlace``), and use
:func:`by_id` and :func:`averages_here`.
"""

from __future__ import annotations

from ring_strategy._core.registry import (
    ProcessSet,
    SetPlace,
    add_process_set,
    averages_here,
    by_id,
    global_process_set,
    place_of,
    remove_process_set,
)

__all__ = ["ProcessSet", "global_process_set", "SetPlace", "place_of", "by_id", "averages_here", "add_process_set",
           "remove_process_set"]


def __getattr__(name: str) -> object:
    # The former per-module state: the sets now live in the current world.
    if name == "_world":
        from ring_strategy._core import world

        return world.current()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
