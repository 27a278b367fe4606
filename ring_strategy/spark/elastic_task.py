"""The body of one Spark task of an elastic ring job: it runs one elastic worker.

The tasks of an elastic job form an ordinary (not barrier) stage of
``max_num_proc`` tasks, so they start as task slots allow: those that
cannot start at first (the cluster is full) start when slots free up, and
join the running job. Each task takes the next worker number from the
driver's store, says which host it runs on (the driver's sign that the
worker joined), and runs the worker as a child process
(:class:`~ring_strategy.spark.task.WorkerProcess`) with the variables of an
elastic worker: the worker learns its rank in each world from the store.

The task reports how its worker ended (``exit/<worker>``, see
:mod:`ring_strategy.spark.spec`) and ends without failing, whatever
happened: the driver decides what it means for the job. A task never fails
its Spark task, so Spark never retries one.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable, Iterator, Optional

from ring_strategy import _contracts as names
from ring_strategy.environments.network import route_address
from ring_strategy.runner.job import describe
from ring_strategy.runner.store import StoreClient
from ring_strategy.runner.worker_env import elastic_worker_environment
from ring_strategy.spark.spec import JobSpec
from ring_strategy.spark.task import WorkerProcess

__all__ = ["ElasticTask", "run_elastic_partition"]


def run_elastic_partition(spec: JobSpec, rows: Iterable[Any]) -> Iterator[Any]:
    """The elastic stage's ``mapPartitions`` function: runs one worker; the
    results travel through the store, so it yields nothing."""
    ElasticTask(spec).run()
    return iter(())


class ElasticTask:
    """Runs one elastic worker and reports how it ended.

    Args:
        spec: The job.
    """

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    def run(self) -> None:
        spec = self.spec
        with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
            if client.try_get(spec.key("done")) is not None:
                return  # the job ended before this task started
            worker = client.add(spec.key("workers"), 1) - 1
            host = route_address(spec.rendezvous_address)  # this executor's address, as the driver sees it
            env = elastic_worker_environment(
                {}, worker=worker, rendezvous_address=spec.rendezvous_address, secret=spec.secret,
                job_id=spec.job_id, start_timeout=spec.start_timeout, elastic_timeout=spec.elastic_timeout,
                hostname=host)
            env[names.ADVERTISE_HOST] = host
            client.set(spec.key("started", worker), b"1")
            client.set(spec.key("host", worker), host.encode())
            try:
                stop = [spec.key("abort"), spec.key("stop", worker)]
                # One worker a task: its share is the CPUs Spark gives the task (spark.task.cpus).
                returncode, data = WorkerProcess(spec, worker, env, stop, cpus=_task_cpus()).run(client)
                client.set(spec.key("exit", worker), self._report(worker, returncode, data, client).encode())
            finally:
                if client.try_get(spec.key("abort")) is not None or client.try_get(spec.key("done")) is not None:
                    names.remove_job_shm(spec.job_id)  # the job is over on every host: nothing of it is in use
                client.set(spec.key("ended", worker), b"1")

    def _report(self, worker: int, returncode: Optional[int], data: Optional[bytes], client: StoreClient) -> str:
        """Stores the worker's outcome and returns how it ended (see the module's docstring)."""
        spec = self.spec
        if returncode is None:
            return "stopped"
        if returncode == 0 and data is not None:
            try:
                client.set(spec.key("result", worker), data)
            except ValueError as e:  # larger than a store frame
                data = pickle.dumps(("error", RuntimeError(f"worker {worker}'s result cannot be sent: {e}"), ""))
                client.set(spec.key("error", worker), data)
                return "error"
            return "ok"
        if data is not None:
            client.set(spec.key("error", worker), data)
            return "error"
        print(f"ring_strategy.spark: elastic worker {worker} {describe(returncode)}", flush=True)
        return "lost"


def _task_cpus() -> Optional[int]:
    """The CPUs Spark gives this task, or None outside a Spark task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    context = TaskContext.get()
    return context.cpus() if context is not None else None
