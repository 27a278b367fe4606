"""``ring_strategy.spark.run_elastic``: an elastic ring job whose workers are
Spark tasks, as ``horovod.spark.run_elastic``.

``fn`` is written as an elastic script (``ring_strategy.elastic.run`` or a
front end's, and a state object it commits). The driver runs an ordinary
stage of ``max_num_proc`` tasks (:mod:`ring_strategy.spark.elastic_task`),
each an elastic worker, and plays ringrun's elastic driver for them
(:class:`ring_strategy.runner.worlds.Worlds` publishes the worlds):

- the first world forms once ``num_proc`` workers have joined, or, after
  ``start_timeout``, with the ``min_num_proc`` or more that have;
- a task that starts later (a slot freed up) joins: the next world adds its
  worker, and the others reset into it at their next commit;
- a worker lost (its process killed) is left behind: the others form the
  next world without it; with fewer than ``min_num_proc`` left, they wait
  for workers to join, and the job fails after ``elastic_timeout``;
- a worker whose function returned has finished: no worker joins from then
  on, and the job ends once every member has finished;
- a function that raises ends the job with its error, as without elastic;
- more than ``reset_limit`` resets end the job with an error.

Spark never retries a task of this stage (a task ends without failing), so
a lost worker is not replaced by Spark: only tasks that have not started yet
can join.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import threading
import time
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence

from ring_strategy.environments.elastic import elastic_timeout as elastic_timeout_from
from ring_strategy.runner.run_fn import reject_unsupported
from ring_strategy.runner.store import StoreClient
from ring_strategy.runner.worlds import Worlds
from ring_strategy.spark.cluster import active_context, start_timeout_seconds
from ring_strategy.spark.driver import (
    check_num_proc, forwarded_output, job_fields, job_group, job_store, new_job, raise_failure, stop_workers,
)
from ring_strategy.spark.elastic_task import run_elastic_partition
from ring_strategy.spark.spec import JobSpec

__all__ = ["run_elastic"]

# Seconds between two looks at the store while the job runs.
_POLL_SECONDS = 0.1


def run_elastic(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                num_proc: Optional[int] = None, min_num_proc: Optional[int] = None,
                max_num_proc: Optional[int] = None, start_timeout: Optional[float] = None,
                elastic_timeout: Optional[float] = None, reset_limit: Optional[int] = None,
                env: Optional[Mapping[str, str]] = None, stdout: Optional[IO[str]] = None,
                stderr: Optional[IO[str]] = None, verbose: int = 1, nics: Optional[Any] = None,
                prefix_output_with_timestamp: bool = False, min_np: Optional[int] = None,
                max_np: Optional[int] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` as an elastic job on Spark tasks (see the module's docstring).

    Args:
        fn: An elastic training function; pickled with cloudpickle.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        num_proc: The workers to start with (default: ``spark.default.parallelism``).
        min_num_proc: The fewest workers the job trains with (default: ``num_proc``).
        max_num_proc: The most workers, and the number of tasks (default: ``num_proc``).
        start_timeout: Seconds for the first workers to join and for each
            world's workers to find each other (default:
            ``RING_SPARK_START_TIMEOUT`` or ``HOROVOD_SPARK_START_TIMEOUT``, else 600).
        elastic_timeout: Seconds the job may have fewer than ``min_num_proc``
            workers (default: ``RING_ELASTIC_TIMEOUT`` or
            ``HOROVOD_ELASTIC_TIMEOUT``, else 600).
        reset_limit: The most resets (None: no limit).
        env, stdout, stderr, verbose, nics: As :func:`ring_strategy.spark.run`'s
            (output lines carry the worker's number).
        min_np, max_np: Other names of ``min_num_proc`` and ``max_num_proc``.
        prefix_output_with_timestamp: Not supported: NotImplementedError when set.

    Returns:
        The result of each worker that finished, in the order the workers
        joined (the rank order of the last world).

    Raises:
        The exception a worker's function raised, with its traceback as
        ``__cause__``; RuntimeError when the job has too few workers for too
        long, resets more than ``reset_limit`` times, or Spark fails the stage.
    """
    reject_unsupported("ring_strategy.spark.run_elastic", {
        "prefix_output_with_timestamp": prefix_output_with_timestamp,
    }, "output lines carry their worker's number only")
    context = active_context()
    fields = job_fields(fn, args, kwargs, env, executable=None, nics=nics, stdout=stdout, stderr=stderr)
    size = check_num_proc(context, num_proc, verbose)
    low, high = _bounds(size, min_num_proc if min_num_proc is not None else min_np,
                        max_num_proc if max_num_proc is not None else max_np)
    if reset_limit is not None and (isinstance(reset_limit, bool) or not isinstance(reset_limit, int)
                                    or reset_limit < 0):
        raise ValueError(f"reset_limit should be a non-negative integer. Got: {reset_limit!r}")
    timeout = start_timeout_seconds(start_timeout)
    waiting = _elastic_timeout(elastic_timeout)
    job_id, secret = new_job()
    with job_store(context, secret, job_id) as address:
        spec = JobSpec(job_id=job_id, secret=secret, rendezvous_address=address, size=high,
                       start_timeout=timeout, elastic_timeout=waiting, **fields)
        with forwarded_output(spec, stdout, stderr):
            job = ElasticJob(context, spec, size, low, reset_limit,
                             f"ring_strategy.spark.run_elastic: {getattr(fn, '__name__', 'fn')}")
            return job.run()


def _bounds(num_proc: int, low: Optional[int], high: Optional[int]) -> tuple:
    low = num_proc if low is None else low
    high = num_proc if high is None else high
    for name, value in (("min_num_proc", low), ("max_num_proc", high)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} should be a positive integer. Got: {value!r}")
    if not low <= num_proc <= high:
        raise ValueError(f"min_num_proc <= num_proc <= max_num_proc should hold. Got: {low}, {num_proc}, {high}")
    return low, high


def _elastic_timeout(value: Optional[float]) -> float:
    if value is None:
        return elastic_timeout_from(os.environ)
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"elastic_timeout should be a positive number of seconds. Got: {value!r}")
    return float(value)


class ElasticJob:
    """Runs the stage of an elastic job and follows its workers (see the module's docstring).

    Args:
        context: The SparkContext.
        spec: The job (``size`` is the number of tasks: ``max_num_proc``).
        num_proc: The workers the first world waits for.
        min_num_proc: The fewest workers a world may have.
        reset_limit: The most resets, or None.
        description: Spark's description of the job.
    """

    def __init__(self, context: Any, spec: JobSpec, num_proc: int, min_num_proc: int,
                 reset_limit: Optional[int], description: str) -> None:
        self.context, self.spec = context, spec
        self.num_proc, self.min_num_proc = num_proc, min_num_proc
        self.reset_limit, self.description = reset_limit, description
        self.group = f"ring-{spec.job_id}"
        self.stage_error: Optional[BaseException] = None
        self.stage_done = False  # every task has ended: no worker can join any more
        self.joined: Dict[int, str] = {}  # every worker that joined -> its host
        self.exited: Dict[int, str] = {}  # every worker that ended -> how
        self.results: Dict[int, bytes] = {}

    def run(self) -> List[Any]:
        spec = self.spec
        stage = threading.Thread(target=self._run_stage, name="ring-spark-elastic-stage", daemon=True)
        worlds = Worlds(spec.rendezvous_address, spec.secret, spec.job_id, [], self.min_num_proc,
                        spec.start_timeout, self.reset_limit)
        stage.start()
        try:
            with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
                self._follow(client, worlds)
                client.set(spec.key("done"), b"1")
        except BaseException as e:
            self.context.cancelJobGroup(self.group)
            stop_workers(spec, sorted(self.joined))
            if not isinstance(e, Exception):
                raise
            raise_failure(spec, sorted(self.joined), e)
            raise
        finally:
            worlds.close()
        stop_workers(spec, sorted(self.joined))  # those that joined after the end; the others have ended
        self.context.cancelJobGroup(self.group)  # the tasks that never started
        stage.join()
        return [pickle.loads(self.results[w])[1] for w in sorted(self.results)]

    def _run_stage(self) -> None:
        spec = self.spec
        try:
            with job_group(self.context, self.group, self.description):
                self.context.parallelize(range(spec.size), spec.size).mapPartitions(
                    functools.partial(run_elastic_partition, spec)).collect()
        except BaseException as e:  # noqa: BLE001 - the driver's loop reports it
            self.stage_error = e
        finally:
            self.stage_done = True

    def _follow(self, client: StoreClient, worlds: Worlds) -> None:
        """Forms the worlds until every member has finished; raises what ends the job early."""
        started, short_since = time.monotonic(), None
        while True:
            joined = self._new_workers(client)
            if self.results:  # the job is ending: no one joins any more
                for worker in joined:
                    client.set(self.spec.key("stop", worker), b"1")
            elif worlds.world is None:
                self._first_world(worlds, started)
            else:
                worlds.join(joined)
            for worker, how in self._new_exits(client).items():
                if how == "error":
                    raise RuntimeError(f"elastic worker {worker} failed")  # raise_failure finds its error
                if worker not in worlds.members:
                    continue
                if how == "ok":
                    self.results[worker] = client.get(self.spec.key("result", worker))
                    worlds.finished(worker)
                else:
                    worlds.lost(worker)
            if self.results and not worlds.members:
                return
            short = worlds.world is not None and len(worlds.members) < self.min_num_proc and not self.results
            short_since = (short_since or time.monotonic()) if short else None
            self._check(short_since)
            worlds.poll_resets()
            time.sleep(_POLL_SECONDS)

    def _first_world(self, worlds: Worlds, started: float) -> None:
        """Forms the first world once enough workers have joined, or fails after ``start_timeout``."""
        ready = {w: h for w, h in self.joined.items() if w not in self.exited}
        late = time.monotonic() - started >= self.spec.start_timeout
        if len(ready) >= self.num_proc or (late and len(ready) >= self.min_num_proc):
            worlds.join(ready)
        elif late:
            raise RuntimeError(
                f"ring_strategy.spark.run_elastic: {len(ready)} workers joined within start_timeout="
                f"{self.spec.start_timeout:g} s, fewer than min_num_proc={self.min_num_proc} "
                "(are there enough task slots?)")

    def _check(self, short_since: Optional[float]) -> None:
        if self.stage_error is not None:
            raise self.stage_error
        if short_since is not None and self.stage_done:
            raise RuntimeError(f"ring_strategy.spark.run_elastic: fewer than min_num_proc={self.min_num_proc} "
                               "workers are left, and every task of the stage has ended")
        if short_since is not None and time.monotonic() - short_since > self.spec.elastic_timeout:
            raise RuntimeError(
                f"ring_strategy.spark.run_elastic: fewer than min_num_proc={self.min_num_proc} workers for "
                f"more than elastic_timeout={self.spec.elastic_timeout:g} s")

    def _new_workers(self, client: StoreClient) -> Dict[int, str]:
        """The workers that joined since the last look: worker -> host."""
        count = int(client.try_get(self.spec.key("workers")) or b"0")
        new = {}
        for worker in range(len(self.joined), count):
            host = client.try_get(self.spec.key("host", worker))
            if host is None:
                break  # it took its number but has not said where it runs yet
            new[worker] = self.joined[worker] = host.decode()
        return new

    def _new_exits(self, client: StoreClient) -> Dict[int, str]:
        """The workers that ended since the last look: worker -> how."""
        new = {}
        for worker in self.joined:
            if worker in self.exited:
                continue
            how = client.try_get(self.spec.key("exit", worker))
            if how is not None:
                new[worker] = self.exited[worker] = how.decode()
        return new
