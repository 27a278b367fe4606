"""Layer 6 of the core: process-set registration.

Holds :class:`ProcessSet`, the registered sets of the world
(:class:`ring_strategy._core.world.World`) and :func:`place_of`, the check
every front end makes of a ``process_set=`` argument. The public module,
:mod:`ring_strategy.process_sets`, documents the rules.

Registration is agreed on in Python, with the core's own
``allgather_object`` (:mod:`ring_strategy._core.objects`, below this module)
on the global set, rather than in the engine beside ``agreement.cc``: the
agreement compares Python values (rank lists, ids, each rank's problem in
words) and its errors quote them on every rank; the engine's part is only
to add, drain and remove a set (:mod:`ring_strategy._core.engine`).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from ring_strategy import _native
from ring_strategy._core import engine, objects, world
from ring_strategy._core.world import SetPlace
from ring_strategy.exceptions import BadArgumentError, ShutdownError

__all__ = ["ProcessSet", "SetPlace", "add_process_set", "averages_here", "by_id", "global_process_set",
           "place_of", "remove_process_set", "start"]


def _env() -> Any:
    env = world.now.env
    if env is None:
        raise ShutdownError(world.NOT_INITIALIZED)
    return env


def _rank() -> int:
    return _env().rank


def _size() -> int:
    return _env().size


class ProcessSet:
    """The ranks an operation runs on, as in Horovod.

    A set is usable once registered (``init(process_sets=...)`` or
    ``add_process_set``), which gives it ``process_set_id``. A set of every
    rank is the global set.

    Args:
        ranks: the global ranks of the set (a list, tuple or range of ints).
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
        me = _rank()
        return ranks.index(me) if me in ranks else -1

    def included(self) -> Optional[bool]:
        """True when this process belongs to the set."""
        ranks = self.ranks
        return None if ranks is None else _rank() in ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self) -> None:
        self._ranks = None
        self.process_set_id = 0

    @property
    def ranks(self) -> Optional[List[int]]:
        return list(range(_size())) if world.now.runtime is not None else None

    def __repr__(self) -> str:
        return "global_process_set"


global_process_set: ProcessSet = _GlobalProcessSet()


def place_of(process_set: Any) -> SetPlace:
    """The place of this rank in ``process_set``; BadArgumentError when it is
    not a registered set of this world or this rank is not in it."""
    if process_set is global_process_set:
        return world.now.global_place or SetPlace(0, _size(), _rank())
    if not isinstance(process_set, ProcessSet):
        raise BadArgumentError(f"process_set should be a ProcessSet. Got: {process_set!r}")
    ps_id = process_set.process_set_id
    if ps_id is None or world.now.sets.get(ps_id) is not process_set:
        if process_set.ranks == list(range(_size())):
            return SetPlace(0, _size(), _rank())  # every rank: the global set
        raise BadArgumentError(
            f"{process_set!r} is not registered in this world: pass it to init(process_sets=...) or "
            "add_process_set() on every rank first"
        )
    me = process_set.rank()
    if me < 0:
        raise BadArgumentError(f"rank {_rank()} is not a member of {process_set!r}: only its ranks may use it")
    return SetPlace(ps_id, len(process_set.ranks or ()), me)


def by_id(process_set_id: Any) -> ProcessSet:
    """The registered set with this id (0: the global set); BadArgumentError otherwise."""
    if process_set_id == 0:
        return global_process_set
    found = world.now.sets.get(process_set_id) if isinstance(process_set_id, int) else None
    if found is None:
        raise BadArgumentError(f"no process set has id {process_set_id!r} in this world")
    return found


def averages_here(process_set: Any) -> bool:
    """Whether a distributed optimizer on ``process_set`` reduces gradients on
    this rank: it is a member of a set of more than one rank (a rank outside
    the set trains alone)."""
    return bool(process_set.included()) and place_of(process_set).size > 1


def _dynamic_variables() -> str:
    """How the engine's configuration table names the dynamic switch."""
    for name, alias, _, _ in _native.config_table():
        if name == "RING_DYNAMIC_PROCESS_SETS":
            return f"{name}=1 (or {alias}=1)"
    raise AssertionError("the engine's configuration table has no RING_DYNAMIC_PROCESS_SETS")


def _as_set(process_set: Any) -> ProcessSet:
    return process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)


def _local_problem(ranks: Optional[List[int]]) -> Optional[str]:
    """What is wrong with registering ``ranks`` here, or None."""
    n = _size()
    if not ranks:
        return "a process set needs at least one rank"
    if ranks[0] < 0 or ranks[-1] >= n:
        return f"process set ranks {ranks} should be in [0, {n})"
    if ranks == list(range(n)):
        return "a process set of every rank is the global set, which always exists"
    for other in world.now.sets.values():
        if other.ranks == ranks:
            return f"a process set with ranks {ranks} exists already ({other!r})"
    return None


def _agree(what: str, mine: Any, problem: Optional[str]) -> None:
    """Collective: every rank shows its view of a registration and its local
    problem; raises BadArgumentError on every rank unless all are alike and
    none has a problem."""
    views = objects.allgather_object((mine, problem), "ring.process_sets.agree", 0)
    problems = [f"rank {r}: {p}" for r, (_, p) in enumerate(views) if p]
    if problems:
        raise BadArgumentError(f"{what} refused: " + "; ".join(problems))
    if any(v != views[0][0] for v, _ in views):
        shown = ", ".join(f"rank {r}: {v!r}" for r, (v, _) in enumerate(views))
        raise BadArgumentError(f"{what}: the ranks disagree ({shown}); every rank must make the same call")


def _register(ps: ProcessSet) -> Optional[str]:
    """Registers ``ps`` in the engine under the next id; a problem instead
    (never raises for a refusal: the caller still has to join the agreement)."""
    problem = _local_problem(ps.ranks)
    if problem is None:
        try:
            engine.add_set(world.now.next_set_id, ps.ranks)
        except BadArgumentError as e:
            problem = str(e)
    return problem


def start(process_sets: Any) -> None:
    """Called by ``init()`` once the new world's engine runs: registers
    ``process_sets`` (None, "dynamic" or a list of sets) on every rank
    together. The ended world's sets stay with it."""
    w = world.now
    w.dynamic = bool(engine.setting("dynamic_process_sets"))
    if process_sets is None:
        return
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise BadArgumentError(f"process_sets should be a list of sets or 'dynamic'. Got: {process_sets!r}")
        w.dynamic = True
        return
    sets = [_as_set(p) for p in process_sets]
    added: List[int] = []
    problem = None
    for ps in sets:
        problem = _register(ps)
        if problem:
            break
        added.append(w.next_set_id)
        w.sets[w.next_set_id] = ps  # so a later duplicate in the list is seen
        w.next_set_id += 1
    try:
        _agree("init(process_sets=...)", [ps.ranks for ps in sets], problem)
    except BadArgumentError:
        for ps_id in added:
            engine.remove_set(ps_id)
        w.sets.clear()
        w.next_set_id = 1
        raise
    for ps_id, ps in zip(added, sets):
        ps.process_set_id = ps_id


def _require_dynamic(what: str) -> None:
    _env()  # ShutdownError before init()
    if not world.now.dynamic:
        raise BadArgumentError(
            f"{what} after init() needs dynamic process sets: set {_dynamic_variables()} or call "
            "init(process_sets='dynamic'); otherwise list the sets in init(process_sets=[...])"
        )


def add_process_set(process_set: Any) -> ProcessSet:
    """Registers a process set on every rank (collective: every rank calls it
    with the same ranks) and returns it, with its ``process_set_id``.

    Needs dynamic process sets (see the module's documentation).

    Args:
        process_set: a ProcessSet, or a list of global ranks.

    Raises:
        BadArgumentError: on every rank, when the ranks disagree, a set with
            these ranks exists already, or a rank is out of range.
    """
    _require_dynamic("add_process_set")
    ps = _as_set(process_set)
    ps_id = world.now.next_set_id
    problem = _register(ps)  # before agreeing: rank 0 knows it before any rank can use it
    try:
        _agree("add_process_set", (ps_id, ps.ranks), problem)
    except BadArgumentError:
        if problem is None:
            engine.remove_set(ps_id)
        raise
    world.now.next_set_id += 1
    world.now.sets[ps_id] = ps
    ps.process_set_id = ps_id
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a registered process set on every rank (collective: every
    rank calls it, in the same order). Returns False when the set is not
    registered (on every rank alike).

    Blocks, as Horovod's does, until this rank's operations of the set have
    finished (asynchronous ones too: their handles stay valid for
    ``synchronize``) and every rank has called it; the set then leaves the
    engines, with nothing of it queued or in flight anywhere.

    Raises:
        BadArgumentError: for the global set; on every rank when the ranks
            disagree, or when some rank's operations of the set did not
            finish within ``RING_TIMEOUT_SECONDS`` (a member never submitted
            them): the set then stays registered everywhere.
    """
    if process_set is global_process_set or getattr(process_set, "process_set_id", None) == 0:
        raise BadArgumentError("the global process set cannot be removed")
    _require_dynamic("remove_process_set")
    ps_id = getattr(process_set, "process_set_id", None)
    known = ps_id is not None and world.now.sets.get(ps_id) is process_set
    problem = _drain(ps_id, process_set) if known else None
    _agree("remove_process_set", ps_id if known else None, problem)
    if not known:
        return False
    _unregister(ps_id)
    del world.now.sets[ps_id]
    process_set.process_set_id = None
    return True


def _timeout_s() -> float:
    return float(engine.setting("timeout_seconds"))


def _drain(ps_id: int, ps: ProcessSet) -> Optional[str]:
    """Waits, at most the job's timeout, until this rank has no unfinished
    operation of ``ps`` (engine id ``ps_id``), whichever front end or
    framework kernel queued it; what is wrong otherwise. Every rank drains
    before it agrees, so once all have agreed no rank has a request of the
    set left for rank 0 to negotiate."""
    timeout = _timeout_s()
    if engine.wait_set_idle(ps_id, timeout):
        return None
    return (f"operations of {ps!r} still in flight on rank {_rank()} after {timeout:g} s "
            "(RING_TIMEOUT_SECONDS): every member of the set must submit each of them before removing it")


def _unregister(ps_id: int) -> None:
    """Drops set ``ps_id`` from this rank's engine, after every rank agreed.
    The engine refuses while this rank has operations of the set in flight:
    only ones another thread queued after :func:`_drain`, a misuse that
    raises BadArgumentError here (the set then stays registered here)."""
    try:
        engine.remove_set(ps_id)
    except BadArgumentError as e:
        raise BadArgumentError(f"remove_process_set: every rank agreed, but {e}") from None
