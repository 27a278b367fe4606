"""Workloads other than one collective at a time (``--case``).

``small-tensors``: the gradients of one training step of a model with many
small layers. Every step submits ``--num-tensors`` allreduces (sums) of
``--tensor-bytes`` each at once and then waits for all of them; the time is
the median per-step time of the slowest rank. ring runs it two ways: one
``allreduce_async`` per tensor and a ``synchronize`` of each (``ring``), and
one ``grouped_allreduce_async`` of them all and one ``synchronize``
(``ring-grouped``). With ``--compare gloo`` gloo
runs the same step two ways: one ``all_reduce(async_op=True)`` per tensor and
then a wait for each (``gloo``), and the tensors copied into one flat buffer,
one ``all_reduce``, and copied back (``gloo-coalesced``, what DDP's buckets
do). With ``--compare mpi``: ``Iallreduce`` per tensor and ``Waitall``
(``mpi``), and one ``Allreduce`` of the concatenated tensors
(``mpi-coalesced``).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

import ring_strategy as rs
from ring_strategy.bench.backend import Backend, StepCall
from ring_strategy.bench.collectives import bus_factor, count_wrong, expected_output, make_input
from ring_strategy.bench.measure import across_ranks, interleave
from ring_strategy.bench.results import Row

__all__ = ["VARIANTS", "run_small_tensors"]

#: What each variant of the small-tensors case does in one step.
VARIANTS: Dict[str, str] = {
    "ring": "allreduce_async of every tensor (out= an array made once), then synchronize every handle",
    "ring-grouped": "one grouped_allreduce_async of every tensor (out= arrays made once; one engine call), then "
                    "one synchronize",
    "gloo": "all_reduce(async_op=True) of every tensor, then wait for every one",
    "gloo-coalesced": "tensors copied into one flat buffer, one all_reduce, copied back",
    "mpi": "Iallreduce of every tensor, then Waitall",
    "mpi-coalesced": "one Allreduce of the tensors concatenated",
    "nccl-grouped": "ncclAllReduce of every tensor inside one ncclGroupStart / ncclGroupEnd (--device cuda)",
    "torch-nccl": "torch.distributed all_reduce(async_op=True) of every tensor on NCCL, then wait (--device cuda)",
}


def _steps(backends: Sequence[Backend],
           tensors: List[np.ndarray]) -> Tuple[Dict[str, StepCall], Dict[str, Callable[[], None]]]:
    """Every backend's variants by name, and what ends each variant's turn
    (its backend's :meth:`~ring_strategy.bench.backend.Backend.end_turn`)."""
    steps: Dict[str, StepCall] = {}
    ends: Dict[str, Callable[[], None]] = {}
    for backend in backends:
        for name, step in backend.small_tensor_steps(tensors).items():
            steps[name], ends[name] = step, backend.end_turn
    return steps, ends


def run_small_tensors(
    backends: Sequence[Backend], num_tensors: int, tensor_bytes: int, dtype: np.dtype,
    iters: int, warmup: int, rounds: int, check: bool,
) -> Row:
    """Measures the small-tensors step with every backend's variants.

    Every rank must call it. The returned row's size is the bytes of all the
    tensors of one step; its results are ring's, then each variant's.
    """
    n, me = rs.size(), rs.rank()
    per_tensor = max(1, tensor_bytes // dtype.itemsize)
    tensors = [make_input("allreduce", per_tensor, dtype, me, n) for _ in range(num_tensors)]
    steps, ends = _steps(backends, tensors)
    times = interleave(steps, iters, warmup, rounds, ends)
    wrong: Dict[str, int] = {}
    if check:
        expected = expected_output("allreduce", per_tensor, dtype, me, n)
        checks, ends = _steps(backends, tensors)  # fresh buffers: gloo's are reduced in place
        for name, step in checks.items():
            rs.barrier()
            wrong[name] = sum(count_wrong(out, expected) for out in step())
            ends[name]()
    count = per_tensor * num_tensors
    results = across_ranks(list(steps), times, wrong)
    return Row("small-tensors", count * dtype.itemsize, count, dtype.name, "sum", bus_factor("allreduce", n),
               tuple(results))
