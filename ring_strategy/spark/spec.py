"""What the driver of a Spark ring job hands each of its tasks, and the keys
of the driver's store through which they talk while the job runs.

The driver serves one rendezvous store per job (the one the ranks' engines
meet in, authenticated with the job's secret). Besides the engines' own keys,
the driver and the tasks use these, all under :func:`spark_key`:

- ``attempt/<rank>``: a counter each task of ``rank`` increments when it
  starts; a second attempt (a retried task) refuses to run.
- ``started/<rank>``, ``ended/<rank>``: set by a task when its rank's process
  starts, and once that process has exited and the task has cleaned up.
- ``error/<rank>``: the outcome (pickled ``("error", exception, traceback
  text)``, as :func:`ring_strategy.runner.run_fn.run_task` writes it) of a
  rank that failed.
- ``abort``: set by a task whose rank failed, or by the driver when the Spark
  job failed or was interrupted: every task still running stops its rank.
- ``output/<rank>/<n>``: batch ``n`` (from 0) of the lines of ``rank`` that
  the driver forwards (:mod:`ring_strategy.spark.output`).

An elastic job (:mod:`ring_strategy.spark.elastic`) numbers its workers
instead of ranking them, and these stand for ``<rank>`` there:

- ``workers``: a counter each task increments to take its worker number;
- ``host/<worker>``: the host the worker runs on, set once it has one (the
  driver's sign that the worker joined);
- ``stop/<worker>``: set by the driver to make the task stop its worker;
- ``result/<worker>``: the outcome of a worker that finished (pickled
  ``("ok", result)``);
- ``exit/<worker>``: how the worker ended: ``ok``, ``error`` (with
  ``error/<worker>``), ``lost`` (no outcome: killed) or ``stopped``;
- ``done``: set by the driver when the job has ended; a task that starts
  later leaves at once.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

__all__ = ["JobSpec", "spark_key"]


def spark_key(job_id: str, *parts: object) -> str:
    """A key of Spark job ``job_id`` in its driver's store (see the module's docstring)."""
    return "/".join(["ring", job_id, "spark", *(str(p) for p in parts)])


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """Everything a task needs to run its rank (pickled into the Spark task).

    Attributes:
        job_id: The job id.
        secret: The job secret (it travels with the task, as Spark ships
            every task: protect it with Spark's own RPC authentication and
            encryption on a shared cluster).
        rendezvous_address: ``host:port`` of the driver's store.
        size: The number of ranks (tasks).
        start_timeout: Seconds the ranks may take to find each other.
        payload: The pickled ``(fn, args, kwargs)``.
        env: Variables set for every rank's process, over the executor's environment.
        executable: The Python that runs a rank, or None for the executor's own.
        capture: The streams (``"stdout"``, ``"stderr"``) forwarded to the driver.
        nics: Network interfaces: a rank advertises the IPv4 address of the
            first one its host has (jobs across hosts).
        grace: Seconds between SIGTERM and SIGKILL when a rank is stopped.
        elastic_timeout: An elastic job's: seconds a worker waits for its next world.
    """

    job_id: str
    secret: bytes
    rendezvous_address: str
    size: int
    start_timeout: float
    payload: bytes
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    executable: Optional[str] = None
    capture: Tuple[str, ...] = ()
    nics: Tuple[str, ...] = ()
    grace: float = 5.0
    elastic_timeout: float = 600.0

    def key(self, *parts: object) -> str:
        """:func:`spark_key` of this job."""
        return spark_key(self.job_id, *parts)
