"""Process sets, as in Horovod: the ranks a collective runs on.

Only the global set (every rank) is supported for now: ``process_set=``
accepts :data:`global_process_set` or a ProcessSet of every rank, and any
other set raises NotImplementedError until the engine has sub-rings.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from ring_strategy.basics import is_initialized, rank, size
from ring_strategy.exceptions import BadArgumentError


class ProcessSet:
    """The ranks an operation runs on, as in Horovod.

    Only the global set (every rank) is supported for now: ``process_set=``
    accepts :data:`global_process_set` or a ProcessSet of every rank; any
    other set raises NotImplementedError.

    Args:
        ranks: the ranks of the set.
    """

    def __init__(self, ranks: Sequence[int]):
        if not isinstance(ranks, (list, tuple, range)) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in ranks
        ):
            raise NotImplementedError(
                f"ProcessSet takes a list of ranks (MPI communicators are not supported). Got: {ranks!r}"
            )
        self._ranks: Optional[List[int]] = sorted(set(ranks))
        self.process_set_id: Optional[int] = None

    @property
    def ranks(self) -> Optional[List[int]]:
        return self._ranks

    def size(self) -> Optional[int]:
        """Number of ranks in the set."""
        ranks = self.ranks
        return None if ranks is None else len(ranks)

    def rank(self) -> Optional[int]:
        """This process's index in the set, or -1 when it is not a member."""
        ranks = self.ranks
        if ranks is None:
            return None
        me = rank()
        return ranks.index(me) if me in ranks else -1

    def included(self) -> Optional[bool]:
        """True when this process belongs to the set."""
        ranks = self.ranks
        return None if ranks is None else rank() in ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self) -> None:
        self._ranks = None
        self.process_set_id = 0

    @property
    def ranks(self) -> Optional[List[int]]:
        return list(range(size())) if is_initialized() else None

    def __repr__(self) -> str:
        return "global_process_set"


global_process_set: ProcessSet = _GlobalProcessSet()


def _check_process_set(process_set: Any) -> None:
    if process_set is global_process_set:
        return
    if not isinstance(process_set, ProcessSet):
        raise BadArgumentError(f"process_set should be a ProcessSet. Got: {process_set!r}")
    if process_set.ranks != list(range(size())):
        raise NotImplementedError(
            f"ring supports only the global process set for now; {process_set!r} is not every rank"
        )


def add_process_set(process_set: Any) -> ProcessSet:
    """Registers a process set. Only the global set exists for now: adding
    another raises NotImplementedError."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    _check_process_set(ps)
    ps.process_set_id = 0
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a process set: not supported yet (the global set cannot be removed)."""
    raise NotImplementedError("ring supports only the global process set, which cannot be removed")
