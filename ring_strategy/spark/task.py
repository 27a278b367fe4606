"""The body of one Spark task of a ring job: it runs one rank.

Each task of the barrier stage learns where every task of the stage runs
(``BarrierTaskContext.getTaskInfos``), numbers the ranks host by host as
ringrun would (:func:`ring_strategy.runner.placement.place`: the first
task's host first, so task 0 is rank 0), and runs its rank as ringrun runs a
local worker: a child process (``python -m ring_strategy.runner.run_fn``,
which runs the pickled function and writes its outcome) in its own process
group, with the ``RING_*`` variables of its place and its share of the
host's CPUs (:mod:`ring_strategy.runner.threads`; rank 0's task says once,
in its executor's log, what it chose), that stops itself if the task's Python worker dies (Spark killed it). The task watches the job's
``abort`` key meanwhile (:mod:`ring_strategy.spark.spec`): when another rank
failed, it stops its own (SIGTERM, then SIGKILL after the grace period).

A rank that fails fails its task with the rank's traceback, after leaving
the outcome in the store for the driver, which re-raises the exception
itself; in barrier mode Spark then kills the other tasks and fails the job
(a failed barrier result stage is never retried). A second attempt of a task
refuses to run, so a retry is never a silent second job.
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import signal
import sys
import tempfile
import traceback
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence, Tuple

from ring_strategy import _contracts as names
from ring_strategy.runner.bootstrap import interface_address
from ring_strategy.runner.job import LocalWorkers, describe
from ring_strategy.runner.output import Output
from ring_strategy.runner import threads
from ring_strategy.runner.placement import Placement, place, placement_environment
from ring_strategy.runner.run_fn import result_path, task_path
from ring_strategy.runner.store import StoreClient
from ring_strategy.spark.output import StoreOutput
from ring_strategy.spark.spec import JobSpec

__all__ = ["RankTask", "WorkerProcess", "run_partition"]

# Seconds between two looks at the stop keys while a worker runs.
_POLL_SECONDS = 0.25


def run_partition(spec: JobSpec, rows: Iterable[Any]) -> Iterator[Tuple[int, bytes]]:
    """The barrier stage's ``mapPartitions`` function: runs this task's rank.

    Yields:
        One ``(rank, pickled ("ok", result))``.
    """
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    hosts = [_host(info.address) for info in context.getTaskInfos()]
    placement = next(p for p in place([(h, h) for h in hosts]) if p.worker == context.partitionId())
    yield placement.rank, RankTask(spec, placement).run()


def _host(address: str) -> str:
    """The host of an executor's ``host:port``."""
    return address.rpartition(":")[0].strip("[]") or address


class WorkerProcess:
    """Runs one worker of a job (a rank, or an elastic worker) in a child
    process of this task, as ringrun runs a local worker.

    Args:
        spec: The job.
        number: The worker's rank (its number, for an elastic worker): it
            names its outcome file and prefixes its output lines.
        env: The worker's ``RING_*`` variables.
        stop_keys: Store keys that, once set, make the task stop the worker.
        local_size: The workers on this host, and ``cpus`` the CPUs they
            share (None: this task's): the worker computes with its share.
    """

    def __init__(self, spec: JobSpec, number: int, env: Dict[str, str], stop_keys: Sequence[str],
                 local_size: int = 1, cpus: Optional[int] = None) -> None:
        self.spec, self.number, self.stop_keys = spec, number, list(stop_keys)
        self.env = {**os.environ, **spec.env, **env}
        address = _nic_address(spec.nics)
        if address is not None:
            self.env[names.ADVERTISE_HOST] = address
        self.threads_note = threads.describe(self.env, local_size, cpus)
        self.env.update(threads.thread_variables(self.env, local_size, cpus))

    def run(self, client: StoreClient) -> Tuple[Optional[int], Optional[bytes]]:
        """Runs the worker to its end.

        Returns:
            Its exit code (None when a stop key made the task stop it) and
            the outcome it wrote (pickled by ``run_task``), if any.
        """
        spec = self.spec
        directory = tempfile.mkdtemp(prefix=f"ring-spark-{self.number}-")
        try:
            with open(task_path(directory), "wb") as f:
                f.write(spec.payload)
            output = (StoreOutput(client, spec.job_id, self.number, spec.size, spec.capture) if spec.capture
                      else Output(spec.size))
            if self.number == 0:  # said once, in the executor's log: the ranks' forwarded output stays theirs
                print(f"ring_strategy.spark: {self.threads_note}", file=sys.stderr, flush=True)
            events: "queue.SimpleQueue[Tuple[str, int, int]]" = queue.SimpleQueue()
            command = [spec.executable or sys.executable, "-m", "ring_strategy.runner.run_fn", directory,
                       str(self.number)]
            workers = LocalWorkers(command, {self.number: self.env}, output, events, spec.grace)
            try:
                code = workers.start()
                returncode = code if code is not None else self._wait(workers, events, client)
            finally:
                workers.close()
                output.join(timeout=2.0)
                output.close()
            path = result_path(directory, self.number)
            return returncode, (open(path, "rb").read() if os.path.exists(path) else None)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _wait(self, workers: LocalWorkers, events: "queue.SimpleQueue[Tuple[str, int, int]]",
              client: StoreClient) -> Optional[int]:
        """The worker's exit code, or None when a stop key was set and the worker stopped."""
        while True:
            try:
                return events.get(timeout=_POLL_SECONDS)[2]
            except queue.Empty:
                pass
            if any(client.try_get(key) is not None for key in self.stop_keys):
                workers.signal(signal.SIGTERM)
                if not workers.wait(self.spec.grace):
                    workers.close()
                return None


class RankTask:
    """Runs one rank of a (non-elastic) job and reports its outcome.

    Args:
        spec: The job.
        placement: The rank's place in it.
    """

    def __init__(self, spec: JobSpec, placement: Placement) -> None:
        self.spec = spec
        self.placement = placement
        self.rank = placement.rank

    def run(self) -> bytes:
        """Runs the rank to its end.

        Returns:
            The rank's pickled outcome ``("ok", result)``.

        Raises:
            RuntimeError: If the rank failed (its traceback in the message),
                was stopped because another one failed, or this is a second
                attempt of the task.
        """
        spec = self.spec
        with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
            if client.add(spec.key("attempt", self.rank), 1) > 1:
                raise RuntimeError(f"ring_strategy.spark: rank {self.rank} already ran in job {spec.job_id}; "
                                   "Spark retried its task, and a ring job runs once: the job fails")
            env = placement_environment(
                self.placement, size=spec.size, rendezvous_address=spec.rendezvous_address, secret=spec.secret,
                job_id=spec.job_id, start_timeout=spec.start_timeout)
            client.set(spec.key("started", self.rank), b"1")
            try:
                try:
                    worker = WorkerProcess(spec, self.rank, env, [spec.key("abort")], self.placement.local_size)
                    returncode, data = worker.run(client)
                except Exception as e:  # the worker could not run here (no such interface, say)
                    client.set(spec.key("error", self.rank), pickle.dumps(("error", e, traceback.format_exc())))
                    client.set(spec.key("abort"), b"1")
                    raise
                return self._outcome(returncode, data, client)
            finally:
                for path in names.shm_segment_paths(spec.job_id, [self.rank]):  # left by a killed rank
                    _unlink(path)
                client.set(spec.key("ended", self.rank), b"1")

    def _outcome(self, returncode: Optional[int], data: Optional[bytes], client: StoreClient) -> bytes:
        """The rank's outcome; records a failure for the driver and raises it."""
        if returncode == 0 and data is not None:  # run_task exits 0 only after writing ("ok", result)
            return data
        outcome = _load(data)
        if outcome is not None and outcome[0] == "error":
            client.set(self.spec.key("error", self.rank), data or b"")
        if returncode is None:
            raise RuntimeError(f"ring_strategy.spark: rank {self.rank} was stopped: the job was aborted "
                               "(another rank failed, or the driver stopped the job)")
        if outcome is None or outcome[0] != "error":
            outcome = ("error", RuntimeError(f"the process of rank {self.rank} {describe(returncode)}"), "")
            client.set(self.spec.key("error", self.rank), pickle.dumps(outcome))
        client.set(self.spec.key("abort"), b"1")
        raise RuntimeError(f"ring_strategy.spark: rank {self.rank} failed: {outcome[1]!r}\n{outcome[2]}")


def _load(data: Optional[bytes]) -> Optional[Tuple[Any, ...]]:
    """An outcome file's tuple, or None when there is none or it cannot be read here."""
    if data is None:
        return None
    try:
        return tuple(pickle.loads(data))
    except Exception:  # noqa: BLE001 - e.g. an exception class this process cannot import
        return ("error", "an error this task cannot unpickle", "")


def _nic_address(nics: Tuple[str, ...]) -> Optional[str]:
    """The IPv4 address of the first of ``nics`` this host has, or None."""
    for nic in nics:
        try:
            return interface_address(nic)
        except OSError:
            continue
    if nics:
        raise OSError(f"none of the network interfaces {', '.join(nics)} has an IPv4 address on this host")
    return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
