"""Removing dynamic process sets while their members still use them (issue 37),
on the numpy core: ``python process_set_removal.py [--cycles=N] SCENARIO...``
on 2 or 4 ranks.

Rank 0 negotiates every set, so each scenario has some rank reach
``remove_process_set`` while another still has operations of the set queued
or running; every scenario ends in a barrier (run_scenarios' after_each), as a
test suite's tearDown does. Each prints ``<rank>: <scenario> ok``
(tests/workers/checks.py). The job runs with a short RING_TIMEOUT_SECONDS,
which bounds how long a removal waits for operations that never finish.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

import ring_strategy as rs
from tests.workers.checks import equal, raises, run_scenarios

ME = N = 0


def split_even_odd() -> Tuple[rs.ProcessSet, rs.ProcessSet, rs.ProcessSet]:
    """The even and odd ranks as two sets, and the one this rank is in."""
    even = rs.add_process_set(list(range(0, N, 2)))
    odd = rs.add_process_set(list(range(1, N, 2)))
    return even, odd, even if ME % 2 == 0 else odd


def issue_script() -> None:
    """The issue's script: broadcasts on each rank's own set, then the odd
    set removed first (rank 0, not in it, arrives there at once)."""
    even, odd, mine = split_even_odd()
    root = mine.ranks[0]
    for i in range(8):
        got = rs.broadcast(np.full(3, float(ME + i)), root_rank=root, process_set=mine)
        equal(got, np.full(3, float(root + i)), f"broadcast {i}")
    assert rs.remove_process_set(odd) is True
    assert rs.remove_process_set(even) is True


def collectives_then_remove() -> None:
    """Every kind of collective on each rank's own set (the intermittent
    cases of the issue), the odd ranks slowest: rank 0 reaches the odd
    set's removal while they still submit on it."""
    even, odd, mine = split_even_odd()
    k, me = mine.size(), mine.rank()
    x = np.arange(4 * k, dtype=np.float32) + ME
    want = sum(np.arange(4 * k, dtype=np.float32) + r for r in mine.ranks)
    for _ in range(3):
        if ME % 2:
            time.sleep(0.05)
        equal(rs.allreduce(x, op=rs.Sum, process_set=mine), want, "allreduce")
        equal(rs.allgather(np.array([ME]), process_set=mine), np.array(mine.ranks), "allgather")
        equal(rs.reducescatter(x, op=rs.Sum, process_set=mine), want[4 * me:4 * me + 4], "reducescatter")
        assert rs.broadcast_object({"r": ME}, root_rank=mine.ranks[-1], process_set=mine) == {"r": mine.ranks[-1]}
    assert rs.remove_process_set(odd) is True
    assert rs.remove_process_set(even) is True


def singletons() -> None:
    """One set of one rank each, removed in rank order while later ranks
    still have asynchronous operations of theirs running."""
    sets = [rs.add_process_set([r]) for r in range(N)]
    mine = sets[ME]
    handles = [rs.allreduce_async(np.full(1024, float(i)), op=rs.Sum, process_set=mine) for i in range(16)]
    for ps in sets:
        assert rs.remove_process_set(ps) is True
    for i, h in enumerate(handles):
        equal(rs.synchronize(h), np.full(1024, float(i)), f"singleton allreduce {i}")


def overlapping_sets() -> List[rs.ProcessSet]:
    """Sets sharing ranks: neighbours in a ring (with N=2, each rank alone)."""
    if N == 2:
        return [rs.add_process_set([0]), rs.add_process_set([1])]
    return [rs.add_process_set(sorted({r, (r + 1) % N, (r + 2) % N})) for r in range(N)]


def overlapping() -> None:
    """Operations in flight on every set a rank is in, and on the global
    set, when the sets are removed one after the other, unsynchronized."""
    sets = overlapping_sets()
    pending: List[Tuple[object, np.ndarray]] = []
    for ps in sets:
        if ps.included():
            for i in range(4):
                x = np.full(257, float(ps.process_set_id * 10 + i))
                pending.append((rs.allreduce_async(x, op=rs.Sum, process_set=ps), x * ps.size()))
    glob = rs.allreduce_async(np.ones(5), op=rs.Sum)
    for ps in sets:
        assert rs.remove_process_set(ps) is True
    for h, want in pending:
        equal(rs.synchronize(h), want, "overlapping set allreduce")
    equal(rs.synchronize(glob), np.full(5, float(N)), "global allreduce")


def use_right_after_add() -> None:
    """Members submit on a new set the moment add_process_set returns,
    while rank 0 (not a member) is still busy elsewhere: rank 0's engine
    knows the set from before any rank's add returns."""
    rest = rs.add_process_set(list(range(1, N)))
    if ME == 0:
        time.sleep(0.2)
        assert rs.remove_process_set(rest) is True
        return
    hs = [rs.allreduce_async(np.full(3, float(i)), op=rs.Sum, process_set=rest) for i in range(8)]
    assert rs.remove_process_set(rest) is True
    for i, h in enumerate(hs):
        equal(rs.synchronize(h), np.full(3, float(i * (N - 1))), f"allreduce {i} right after add")


def async_then_remove() -> None:
    """allreduce_async on a set, removed without synchronize: the removal
    waits for it (rank 1 submits late), the handle stays valid."""
    late = rs.add_process_set([0, 1] if N > 2 else [1])
    h = None
    if ME == 1:
        time.sleep(0.3)  # rank 0 is in remove_process_set by now
    if late.included():
        h = rs.allreduce_async(np.full(7, float(ME + 1)), op=rs.Sum, process_set=late)
    assert rs.remove_process_set(late) is True
    assert late.process_set_id is None
    if h is not None:
        want = sum(r + 1 for r in late.ranks or ())
        equal(rs.synchronize(h), np.full(7, float(want)), "allreduce of a removed set")
    if late.included():
        raises(rs.BadArgumentError, lambda: rs.allreduce(np.ones(1), process_set=late), "not registered")


def unfinished_refused() -> None:
    """(3 ranks or more.) An operation only one member submitted never
    finishes: the removal ends on every rank with BadArgumentError within RING_TIMEOUT_SECONDS,
    the set stays usable, and a later removal succeeds."""
    pair = rs.add_process_set([0, 1])
    h = rs.allreduce_async(np.ones(2), op=rs.Sum, name="late", process_set=pair) if ME == 0 else None
    start = time.monotonic()
    raises(rs.BadArgumentError, lambda: rs.remove_process_set(pair), "still in flight on rank 0")
    waited = time.monotonic() - start
    limit = float(rs.basics._runtime().config["timeout_seconds"])
    assert waited < limit + 5, f"refused after {waited:.1f} s"
    print(f"{ME}: unfinished removal refused after {waited:.2f} s", flush=True)
    if ME == 1:
        h = rs.allreduce_async(np.ones(2), op=rs.Sum, name="late", process_set=pair)
    if h is not None:
        equal(rs.synchronize(h), np.full(2, 2.0), "the late allreduce")
    assert rs.remove_process_set(pair) is True


def cycle(i: int) -> None:
    """Adds a set (its ranks vary with ``i``), uses it, removes it (with
    an asynchronous operation still running every other time)."""
    ranks = [r for r in range(N) if (r + i) % 3 != 0] or [i % N]
    if ranks == list(range(N)):
        ranks = ranks[:-1]
    ps = rs.add_process_set(ranks)
    h = None
    if ps.included():
        equal(rs.broadcast(np.full(3, float(ME)), root_rank=ranks[-1], process_set=ps), np.full(3, float(ranks[-1])),
              "cycle broadcast")
        h = rs.allreduce_async(np.full(3, float(i)), op=rs.Sum, process_set=ps)
        if i % 2:
            rs.synchronize(h)
            h = None
    assert rs.remove_process_set(ps) is True
    if h is not None:
        equal(rs.synchronize(h), np.full(3, float(i * len(ranks))), "cycle allreduce")


def cycles(count: int, worlds: int) -> Callable[[], None]:
    """``count`` add/use/remove cycles spread over ``worlds`` worlds
    (shutdown() and init() between them)."""

    def run() -> None:
        for w in range(worlds):
            if w:
                rs.shutdown()
                rs.init(process_sets="dynamic")
            for i in range(w * count // worlds, (w + 1) * count // worlds):
                cycle(i)

    return run


def main() -> None:
    global ME, N
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    rs.init(process_sets="dynamic")
    ME, N = rs.rank(), rs.size()
    scenarios: Dict[str, Callable[[], None]] = {
        f.__name__: f
        for f in (issue_script, collectives_then_remove, singletons, overlapping, use_right_after_add,
                  async_then_remove, unfinished_refused)
    }
    scenarios["cycles"] = cycles(int(opts.get("cycles", 50)), int(opts.get("worlds", 5)))
    run_scenarios(scenarios, names, ME, after_each=rs.barrier, stop_at_failure=True)
    rs.shutdown()


if __name__ == "__main__":
    main()
