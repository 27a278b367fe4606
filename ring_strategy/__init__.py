"""ring: distributed data-parallel training on a native ring-allreduce engine.

Quick start::

    import numpy as np, ring_strategy as rs
    rs.init()
    total = rs.allreduce(np.ones(3, np.float32), op=rs.Sum)

Run it with ``ringrun -np 2 python script.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

# The launcher (ring_strategy.runner) must stay importable without the
# native engine, so the engine-backed API is loaded on first use.
_API = {
    "init": "basics", "shutdown": "basics", "is_initialized": "basics",
    "rank": "basics", "size": "basics", "local_rank": "basics", "local_size": "basics",
    "cross_rank": "basics", "cross_size": "basics",
    "Sum": "ops", "Average": "ops", "Min": "ops", "Max": "ops", "Product": "ops", "Adasum": "ops",
    "Handle": "ops", "synchronize": "ops", "poll": "ops",
    "allreduce": "ops", "allreduce_async": "ops", "grouped_allreduce": "ops", "grouped_allreduce_async": "ops",
    "allgather": "ops", "allgather_async": "ops",
    "broadcast": "ops", "broadcast_async": "ops", "alltoall": "ops", "alltoall_async": "ops",
    "reducescatter": "ops", "reducescatter_async": "ops", "barrier": "ops", "join": "ops",
    "RingError": "exceptions", "BadArgumentError": "exceptions", "MismatchError": "exceptions",
    "PeerFailureError": "exceptions", "RingTimeoutError": "exceptions", "ShutdownError": "exceptions",
    "HorovodInternalError": "exceptions", "HostsUpdatedInterrupt": "exceptions",
    "start_timeline": "timeline", "stop_timeline": "timeline",
    "ProcessSet": "process_sets", "global_process_set": "process_sets",
    "add_process_set": "process_sets", "remove_process_set": "process_sets",
    "broadcast_object": "_objects", "allgather_object": "_objects",
    "run": "runner.run_fn",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'ring_strategy' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"ring_strategy.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))


def _register_with_lightning() -> None:
    # Trainer(strategy="ring"): fills pytorch_lightning's and lightning.pytorch's
    # StrategyRegistry, now or when they are imported. Imports neither torch
    # nor Lightning (see ring_strategy/lightning/_registration.py).
    try:
        from ring_strategy.lightning._registration import install
    except Exception:  # pragma: no cover - a broken install must not break ring_strategy
        return
    install()


_register_with_lightning()
