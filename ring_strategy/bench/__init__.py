"""Collective benchmarks in nccl-tests' format, against other libraries in the same run.

Usage::

    ringrun -np 2 python -m ring_strategy.bench --ops allreduce --sizes 4,4K,64K,1M,16M,64M \\
        --compare gloo --membw --check
    ringrun -np 2 python -m ring_strategy.bench --case small-tensors --compare gloo
    ringrun -np 2 python -m ring_strategy.bench.train --compare ddp

Each size row reads ``size count type redop | time algbw busbw #wrong`` as in
nccl-tests, where time is the *median* per-iteration time of the slowest rank
(nccl-tests prints the mean), ``algbw = size / time`` and ``busbw = algbw x
factor`` with nccl-tests' factors (allreduce 2(n-1)/n; allgather, alltoall and
reducescatter (n-1)/n; broadcast 1). Only rank 0 prints. See
``docs/performance.md`` and ``--help``.

Modules: :mod:`.options` (command line), :mod:`.sizes`, :mod:`.collectives`
(buffers, expected results, factors), :mod:`.backend` (the interface),
:mod:`.ours`, :mod:`.gloo`, :mod:`.mpi`, :mod:`.peers`, :mod:`.measure`
(timing), :mod:`.sweep` (size rows), :mod:`.cases`, :mod:`.membw`,
:mod:`.results`, :mod:`.table` (text and JSON), :mod:`.plot`, :mod:`.cli`,
:mod:`.train` (training throughput against DDP), :mod:`.scaling` (the
allreduce algorithms side by side, and :mod:`.alpha_beta`, their cost
model fitted and extrapolated to large worlds: docs/scaling.md).

Nothing heavy is imported here: torch loads only for ``--compare gloo`` and
``ring_strategy.bench.train``.
"""
