"""Issue 37 as a Horovod user writes it, in ring_strategy.torch with dynamic
process sets: ``python torch_set_removal.py SCENARIO...`` on 2 or 4 ranks.

Each rank uses the set of the even or the odd ranks, then the odd set is
removed first (rank 0, not in it, arrives there at once) and the even set
after; every scenario ends in a barrier (run_scenarios' after_each), as a
test suite's tearDown does. Each prints ``<rank>: <scenario> ok``
(tests/workers/checks.py).
"""

from __future__ import annotations

import sys
from typing import Callable, Dict, Tuple

import torch

import ring_strategy.torch as hvd
from tests.workers.checks import close, equal, run_scenarios

ME = N = 0


def split_even_odd() -> Tuple[hvd.ProcessSet, hvd.ProcessSet, hvd.ProcessSet]:
    even = hvd.add_process_set(list(range(0, N, 2)))
    odd = hvd.add_process_set(list(range(1, N, 2)))
    return even, odd, even if ME % 2 == 0 else odd


def remove_odd_then_even(even: hvd.ProcessSet, odd: hvd.ProcessSet) -> None:
    assert hvd.remove_process_set(odd) is True
    assert hvd.remove_process_set(even) is True


def broadcasts() -> None:
    """The issue's script: several broadcasts on each rank's own set."""
    even, odd, mine = split_even_odd()
    root = mine.ranks[0]
    for i in range(8):
        equal(hvd.broadcast(torch.full((3,), float(ME + i)), root, process_set=mine),
              torch.full((3,), float(root + i)), f"broadcast {i}")
    remove_odd_then_even(even, odd)


def collectives() -> None:
    """The issue's intermittent cases: allgather, allreduce with gradients,
    reducescatter, sparse allreduce and object broadcast on sets."""
    even, odd, mine = split_even_odd()
    k, ranks = mine.size(), mine.ranks
    equal(hvd.allgather(torch.tensor([ME]), process_set=mine), torch.tensor(ranks), "allgather")
    w = torch.full((4,), float(ME + 1), requires_grad=True)
    hvd.allreduce(w * 2, op=hvd.Sum, process_set=mine).sum().backward()
    close(w.grad, torch.full((4,), 2.0 * k), "allreduce gradient")
    equal(hvd.reducescatter(torch.ones(k, 2), op=hvd.Sum, process_set=mine), torch.full((1, 2), float(k)),
          "reducescatter")
    sparse = torch.sparse_coo_tensor([[ME]], [1.0], (N,), check_invariants=True)
    got = hvd.sparse_allreduce_async(sparse, name="sparse", op=hvd.Sum, process_set=mine)()
    equal(got.to_dense(), torch.tensor([1.0 if r in ranks else 0.0 for r in range(N)]), "sparse allreduce")
    assert hvd.broadcast_object(ME, root_rank=ranks[-1], process_set=mine) == ranks[-1]
    remove_odd_then_even(even, odd)


def async_unsynchronized() -> None:
    """allreduce_async on each rank's set, removed before synchronize."""
    even, odd, mine = split_even_odd()
    handles = [hvd.allreduce_async(torch.full((5,), float(i)), op=hvd.Sum, process_set=mine) for i in range(8)]
    remove_odd_then_even(even, odd)
    for i, h in enumerate(handles):
        equal(hvd.synchronize(h), torch.full((5,), float(i * mine.size())), f"allreduce {i}")


def main() -> None:
    global ME, N
    hvd.init(process_sets="dynamic")
    ME, N = hvd.rank(), hvd.size()
    scenarios: Dict[str, Callable[[], None]] = {f.__name__: f for f in (broadcasts, collectives,
                                                                         async_unsynchronized)}
    run_scenarios(scenarios, sys.argv[1:], ME, after_each=hvd.barrier, stop_at_failure=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
