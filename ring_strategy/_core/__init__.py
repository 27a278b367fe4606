"""The framework-free core of ring's Python side, in layers that import only
downward (tests/test_imports.py enforces the order):

1. :mod:`~ring_strategy._core.rules`: argument rules (ops, roots, splits, rows, names of groups).
2. :mod:`~ring_strategy._core.world`: one ``World`` per ``init()``: the engine runtime, rank and size,
   the operations in flight, automatic names, registered process sets.
3. :mod:`~ring_strategy._core.engine`: the one door to the engine: submit, wait_all, poll, release.
4. :mod:`~ring_strategy._core.handles`: operations and handles, with no engine calls of their own.
5. :mod:`~ring_strategy._core.objects`: Python objects across ranks, on the host.
6. :mod:`~ring_strategy._core.registry`: process-set registration, agreed with the objects' collectives.
7. :mod:`~ring_strategy._core.arrays`: collectives on numpy arrays and arrays that speak DLPack (cupy's on
   a GPU: :mod:`~ring_strategy._core.gpu_arrays`, in layer 1); the numpy API's, and the host fallbacks'.

The numpy API (:mod:`ring_strategy.ops`: layer 7 under Horovod's names), ``init``/``shutdown``
(:mod:`ring_strategy.basics`) and every framework front end sit on top.
This package imports none of its modules: import the one you need.
"""
