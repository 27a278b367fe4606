"""The body of one Ray actor of a :class:`~ring_strategy.ray.RayExecutor`.

The class is plain Python; the executor wraps it with ``ray.remote``. Nothing
here imports Ray or the native engine at import time.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from ring_strategy import _contracts as names
from ring_strategy._contracts import remove_job_shm
from ring_strategy.runner import threads

__all__ = ["RingWorker"]


class RingWorker:
    """One rank of a ring job, living in a Ray actor.

    The executor asks where the actor runs (:meth:`node`), gives it its place
    in the job as the ``RING_*`` variables ``ringrun`` would set
    (:meth:`set_env`), and then calls functions in it. A function that calls
    ``ring_strategy.init()`` (or a front end's ``init()``) joins the job.
    """

    def __init__(self) -> None:
        self.executable: Any = None

    def node(self) -> Tuple[str, str]:
        """Returns the Ray node id and IP address of this actor's node."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def set_env(self, env: Mapping[str, str]) -> None:
        """Sets variables in this process's environment (before ``init()``
        reads them), with this rank's share of its node's CPUs
        (:mod:`ring_strategy.runner.threads`: Ray's ``OMP_NUM_THREADS``, the
        actor's CPUs, counts as set); rank 0 (worker 0) says what it chose."""
        os.environ.update(env)
        local_size = int(env.get(names.LOCAL_SIZE, "1"))
        if "0" in (env.get(names.RANK), env.get(names.ELASTIC_WORKER)):
            print(f"ring_strategy.ray: {threads.describe(dict(os.environ), local_size)}", file=sys.stderr, flush=True)
        threads.apply_here(local_size)

    def start_executable(self, cls: Optional[type], args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """Makes the object :meth:`execute` passes to functions (None without a class)."""
        self.executable = None if cls is None else cls(*args, **kwargs)

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        """Returns ``fn(executable)``."""
        return fn(self.executable)

    def run(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        """Returns ``fn(*args, **kwargs)``."""
        return fn(*args, **kwargs)

    def leave(self, job_id: str) -> None:
        """Leaves the ring job if this process joined it and removes the job's
        shared-memory names on this host."""
        from ring_strategy import basics

        try:
            basics.shutdown()
        finally:
            remove_job_shm(job_id)
