"""Process sets on the numpy core, on 4 ranks: ``python process_sets_numpy.py static|dynamic``.

``static``: the job starts with ``init(process_sets=[[0], [1, 2], [0, 1, 2],
[1, 3]])`` (sets of 1, 2 and 3 ranks, overlapping) and runs every
collective on every set, then sets in flight at once, then the errors.
``dynamic`` (RING_DYNAMIC_PROCESS_SETS=1): adding and removing sets,
collectively, and what happens when the ranks disagree.
Each scenario prints ``<rank>: <scenario> ok`` (tests/workers/checks.py).
"""

from __future__ import annotations

import sys
from typing import List

import numpy as np

import ring_strategy as rs
from ring_strategy import process_sets as registry
from tests.workers.checks import equal, raises, run_scenarios

STATIC = [[0], [1, 2], [0, 1, 2], [1, 3]]
ME = N = 0


def my_sets() -> List[rs.ProcessSet]:
    return [ps for ps in registry._world.sets.values() if ps.included()]


def layout() -> None:
    """ids in list order; rank(), size(), included() as Horovod's."""
    sets = list(registry._world.sets.values())
    assert [ps.process_set_id for ps in sets] == [1, 2, 3, 4], sets
    for ps, ranks in zip(sets, STATIC):
        assert ps.ranks == ranks and ps.size() == len(ranks)
        assert ps.included() == (ME in ranks)
        assert ps.rank() == (ranks.index(ME) if ME in ranks else -1)
    assert rs.global_process_set.size() == N and rs.global_process_set.rank() == ME


def collectives_on_each_set() -> None:
    """Every collective on every set this rank is in, against numpy."""
    for ps in my_sets():
        ranks, k, i = ps.ranks, ps.size(), ps.rank()
        x = np.arange(5, dtype=np.float32) + ME
        equal(rs.allreduce(x, op=rs.Sum, process_set=ps), sum(np.arange(5, dtype=np.float32) + r for r in ranks),
              f"sum on {ranks}")
        equal(rs.allreduce(x, op=rs.Max, process_set=ps), np.arange(5, dtype=np.float32) + max(ranks), "max")
        equal(rs.allreduce(x, process_set=ps, prescale_factor=2.0),
              (2 * sum(np.arange(5, dtype=np.float32) + r for r in ranks) / k).astype(np.float32), "average")
        got = rs.allgather(np.full((ME + 1, 2), ME, np.int64), process_set=ps)
        equal(got, np.concatenate([np.full((r + 1, 2), r, np.int64) for r in ranks]), f"allgather on {ranks}")
        for root in ranks:
            equal(rs.broadcast(np.full(3, ME, np.int32), root, process_set=ps), np.full(3, root, np.int32), "bcast")
        splits = [j + 1 for j in range(k)]  # rows to the j-th rank of the set
        sent = np.repeat(np.arange(k) * 10 + ME, splits).astype(np.float64)
        out, received = rs.alltoall(sent, splits=splits, process_set=ps)
        equal(out, np.concatenate([np.full(i + 1, j * 10 + r, np.float64) for r in ranks for j in [i]]), "alltoall")
        equal(received, np.full(k, i + 1, np.int32), "received splits")
        rows = 2 * k + 1  # uneven: lower ranks of the set get one more row
        got = rs.reducescatter(np.ones((rows, 2), np.float32) * (ME + 1), op=rs.Sum, process_set=ps)
        mine = rows // k + (1 if i < rows % k else 0)
        equal(got, np.full((mine, 2), sum(r + 1 for r in ranks), np.float32), "reducescatter")
        rs.barrier(process_set=ps)
        assert rs.allgather_object({"r": ME}, process_set=ps) == [{"r": r} for r in ranks]
        assert rs.broadcast_object(("hi", ME), root_rank=ranks[-1], process_set=ps) == ("hi", ranks[-1])


def sets_in_flight_together() -> None:
    """The same name in every set of this rank and in the global set, plus
    many small tensors per set (fused per set), all in flight at once,
    synchronized in reverse order."""
    handles = []
    for ps in [rs.global_process_set] + my_sets():
        ranks = ps.ranks
        handles.append((rs.allreduce_async(np.full(4, ME + 1.0), op=rs.Sum, name="same", process_set=ps),
                        np.full(4, float(sum(r + 1 for r in ranks)))))
        for t in range(20):
            handles.append((rs.allreduce_async(np.full(3, ME * t, np.float32), op=rs.Sum, name=f"small.{t}",
                                               process_set=ps),
                            np.full(3, sum(r * t for r in ranks), np.float32)))
        handles.append((rs.allgather_async(np.array([ME]), process_set=ps), np.array(ranks)))
    for h, want in reversed(handles):
        equal(rs.synchronize(h), want, "in flight together")


def errors() -> None:
    """Clear errors on the rank that makes them; the others go on."""
    x = np.ones(2, np.float32)
    for ps in registry._world.sets.values():
        if not ps.included():
            raises(rs.BadArgumentError, lambda: rs.allreduce(x, process_set=ps), f"rank {ME} is not a member")
            raises(rs.BadArgumentError, lambda: rs.barrier(process_set=ps), "not a member")
    pair = registry._world.sets[2]  # [1, 2]
    if pair.included():
        raises(rs.BadArgumentError, lambda: rs.broadcast(x, 0, process_set=pair), "root_rank 0 is not a member")
        raises(rs.BadArgumentError, lambda: rs.alltoall(x, splits=[1, 1, 0], process_set=pair), "one entry per rank")
    raises(rs.BadArgumentError, lambda: rs.allreduce(x, process_set=rs.ProcessSet([0, 3])), "not registered")
    raises(rs.BadArgumentError, lambda: rs.allreduce(x, process_set="ranks"), "should be a ProcessSet")
    raises(rs.BadArgumentError, lambda: rs.remove_process_set(rs.global_process_set), "global process set")
    raises(rs.BadArgumentError, lambda: rs.add_process_set([0, 3]), "RING_DYNAMIC_PROCESS_SETS")
    trio = registry._world.sets[3]  # [0, 1, 2]: not a power of two
    if trio.included():
        raises(rs.BadArgumentError, lambda: rs.allreduce(x, op=rs.Adasum, process_set=trio), "process set has 3")
    if pair.included():
        equal(rs.allreduce(x, op=rs.Adasum, process_set=pair), x, "adasum of equal vectors")
    equal(rs.allreduce(x, op=rs.Sum), x * N, "global set still works")


def add_and_remove() -> None:
    """Dynamic sets: added, used, removed, refused afterwards; ids agree."""
    evens = rs.add_process_set([0, 2])
    odds = rs.add_process_set(rs.ProcessSet([1, 3]))
    assert (evens.process_set_id, odds.process_set_id) == (1, 2)
    mine = evens if ME % 2 == 0 else odds
    equal(rs.allgather(np.array([ME]), process_set=mine), np.array(mine.ranks), "dynamic set")
    assert rs.remove_process_set(evens) is True
    assert rs.remove_process_set(evens) is False  # on every rank alike
    if ME % 2 == 0:
        raises(rs.BadArgumentError, lambda: rs.allreduce(np.ones(1), process_set=evens), "not registered")
    assert rs.remove_process_set(odds) is True
    assert rs.add_process_set([0, 1, 2]).process_set_id == 3


def disagreements() -> None:
    """Ranks that disagree get BadArgumentError on every rank; nothing changes."""
    raises(rs.BadArgumentError, lambda: rs.add_process_set([0, ME]) if ME else rs.add_process_set([0, 1]),
           "disagree")
    raises(rs.BadArgumentError, lambda: rs.add_process_set([0, 1, 2]), "exists already")
    raises(rs.BadArgumentError, lambda: rs.add_process_set([0, N]), "should be in [0, 4)")
    raises(rs.BadArgumentError, lambda: rs.add_process_set(list(range(N))), "global set")
    pair = rs.add_process_set([0, 1])
    assert pair.process_set_id == 4  # the refused ones took no id
    # Operations in flight when a set is removed: tests/workers/process_set_removal.py.
    assert rs.remove_process_set(pair) is True


def new_world_forgets_sets() -> None:
    """shutdown() and init() start with the global set only; sets that
    differ between ranks at init() fail on every rank."""
    old = rs.add_process_set([1, 2])
    rs.shutdown()
    rs.init()
    raises(rs.BadArgumentError, lambda: rs.allreduce(np.ones(1), process_set=old), "not registered")
    rs.shutdown()
    raises(rs.BadArgumentError, lambda: rs.init(process_sets=[[0, 1]] if ME else [[0, 2]]), "disagree")
    equal(rs.allreduce(np.ones(1), op=rs.Sum), np.full(1, float(N)), "still initialized")
    raises(rs.BadArgumentError, lambda: rs.remove_process_set(rs.global_process_set), "cannot be removed")


SCENARIOS = {
    "static": [layout, collectives_on_each_set, sets_in_flight_together, errors],
    "dynamic": [add_and_remove, disagreements, new_world_forgets_sets],
}


def main() -> None:
    global ME, N
    mode = sys.argv[1]
    rs.init(process_sets=STATIC if mode == "static" else None)
    ME, N = rs.rank(), rs.size()
    assert N == 4, "run on 4 ranks"
    run_scenarios({f.__name__: f for f in SCENARIOS[mode]}, [f.__name__ for f in SCENARIOS[mode]], ME,
                  after_each=rs.barrier, stop_at_failure=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
