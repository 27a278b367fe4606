"""``ring_strategy.spark.run``: a function on every rank of a ring job whose
ranks are the tasks of one Spark barrier stage, as ``horovod.spark.run``.

The driver (the caller's process) checks that the cluster can start
``num_proc`` tasks together, serves the job's rendezvous store with a fresh
secret (as ringrun does) where Spark's driver listens, and runs a barrier
stage of ``num_proc`` tasks; each task runs one rank in a child process
(:mod:`ring_strategy.spark.task`). The results come back through Spark, in
rank order. When the stage fails, the driver stops what still runs (the
job's ``abort`` key), waits for the tasks to clean up, and raises the
failed rank's own exception.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pickle
import secrets
import time
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ring_strategy._contracts import remove_job_shm
from ring_strategy.runner.run_fn import raise_first_error, reject_unsupported
from ring_strategy.runner.store import StoreClient, StoreServer
from ring_strategy.spark.cluster import (
    active_context, driver_addresses, start_timeout_seconds, wait_for_slots,
)
from ring_strategy.spark.output import OutputReader
from ring_strategy.spark.spec import JobSpec
from ring_strategy.spark.task import run_partition

__all__ = ["run"]

logger = logging.getLogger("ring_strategy.spark")

# Seconds past the grace period the driver waits for stopped tasks to clean up.
_CLEANUP_SECONDS = 5.0
_JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def run(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
        num_proc: Optional[int] = None, start_timeout: Optional[float] = None,
        extra_mpi_args: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
        stdout: Optional[IO[str]] = None, stderr: Optional[IO[str]] = None, verbose: int = 1,
        nics: Optional[Any] = None, prefix_output_with_timestamp: bool = False,
        executable: Optional[str] = None, use_mpi: Optional[bool] = None,
        use_gloo: Optional[bool] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks, one per Spark task.

    The tasks form one barrier stage: Spark starts them all together or fails
    the stage. Ranks are numbered host by host, task 0's host first; ranks
    on one host talk through shared memory. ``fn`` calls the ``init()`` of
    the front end it uses, as a script under ringrun does, and runs in a
    fresh Python process per rank, started by its task.

    Args:
        fn: The function; pickled with cloudpickle (functions of ``__main__``
            and closures travel by value).
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        num_proc: The number of ranks (default: ``spark.default.parallelism``).
        start_timeout: Seconds for the tasks to start and for the ranks to
            find each other (default: ``RING_SPARK_START_TIMEOUT`` or
            ``HOROVOD_SPARK_START_TIMEOUT``, else 600).
        env: Variables set for every rank's process, over its executor's environment.
        stdout: A stream the ranks' standard output goes to, each line
            prefixed by its rank; None leaves it in the executors' logs.
        stderr: The same for standard error.
        verbose: 1 or more logs the job's size (``logging``, logger
            ``ring_strategy.spark``); 2 also its rendezvous address.
        nics: Network interface names; a rank advertises the address of the
            first its host has (jobs across hosts).
        executable: The Python that runs each rank (default: the executor's).
        use_gloo: Accepted and ignored (the engine has one controller).
        extra_mpi_args, use_mpi, prefix_output_with_timestamp: Not supported:
            NotImplementedError when set.

    Returns:
        Each rank's return value, in rank order.

    Raises:
        The exception a rank raised (the lowest rank's, preferring one that
        did not merely lose a peer) with that rank's traceback as its
        ``__cause__``; RuntimeError when the cluster cannot start
        ``num_proc`` tasks together, or the job failed without a rank's
        Python error (a task or executor lost).

    Example:
        >>> def fn():
        ...     import ring_strategy as rs
        ...     rs.init()
        ...     return rs.rank()
        >>> ring_strategy.spark.run(fn, num_proc=2)
        [0, 1]
    """
    reject_unsupported("ring_strategy.spark.run", {
        "extra_mpi_args": extra_mpi_args, "use_mpi": use_mpi,
        "prefix_output_with_timestamp": prefix_output_with_timestamp,
    }, "ranks talk through ring's own engine, and output lines carry their rank only")
    if not callable(fn):
        raise TypeError(f"fn should be callable. Got: {fn!r}")
    context = active_context()
    size = _num_proc(context, num_proc, verbose)
    timeout = start_timeout_seconds(start_timeout)
    wait_for_slots(context, size, timeout)
    from pyspark import cloudpickle

    spec = dict(size=size, start_timeout=timeout, payload=cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}))),
                env=_env(env), executable=executable, nics=_nics(nics))
    streams = {name: s for name, s in (("stdout", stdout), ("stderr", stderr)) if s is not None}
    return SparkJob(context, spec, streams, verbose, getattr(fn, "__name__", "fn")).run()


def _num_proc(context: Any, num_proc: Optional[int], verbose: int) -> int:
    if num_proc is None:
        num_proc = int(context.defaultParallelism)
        if verbose >= 1:
            logger.info("Running %d processes (inferred from spark.default.parallelism)...", num_proc)
    elif isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc should be a positive integer. Got: {num_proc!r}")
    elif verbose >= 1:
        logger.info("Running %d processes...", num_proc)
    return num_proc


def _env(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env should be a mapping of variable names to values. Got: {env!r}")
    return {str(k): str(v) for k, v in env.items()}


def _nics(nics: Any) -> Tuple[str, ...]:
    if nics is None:
        return ()
    if isinstance(nics, str):
        return (nics,)
    return tuple(sorted(nics) if isinstance(nics, (set, frozenset)) else nics)


class SparkJob:
    """One run of a function on the tasks of a barrier stage.

    Args:
        context: The SparkContext.
        spec: :class:`~ring_strategy.spark.spec.JobSpec` fields but the job's
            id, secret and store address, which the job makes.
        streams: The driver's stream for each captured stream name.
        verbose: As :func:`run`'s.
        name: The function's name, for Spark's job description.
    """

    def __init__(self, context: Any, spec: Dict[str, Any], streams: Mapping[str, IO[str]],
                 verbose: int, name: str) -> None:
        self.context = context
        self.job_id = f"spark-{secrets.token_hex(8)}"
        self.secret = secrets.token_bytes(32)
        self.fields = dict(spec, capture=tuple(streams))
        self.streams = streams
        self.verbose = verbose
        self.description = f"ring_strategy.spark.run: {name} on {spec['size']} ranks"

    def run(self) -> List[Any]:
        """Runs the stage; returns each rank's result, by rank (see :func:`run`)."""
        bind, host = driver_addresses(self.context)
        store = StoreServer(self.secret, host=bind)
        store.start()
        reader = None
        try:
            port = store.address.rpartition(":")[2]
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            spec = JobSpec(job_id=self.job_id, secret=self.secret, rendezvous_address=address, **self.fields)
            if self.verbose >= 2:
                logger.info("job %s: %d ranks, rendezvous at %s", self.job_id, spec.size, address)
            if self.streams:
                reader = OutputReader(StoreClient(address, self.secret), self.job_id, spec.size, self.streams)
            rows = self._run_stage(spec)
            return [pickle.loads(data)[1] for _, data in sorted(rows)]
        finally:
            if reader is not None:
                reader.stop()
            store.stop()
            remove_job_shm(self.job_id)  # what ranks killed on this host left

    def _run_stage(self, spec: JobSpec) -> List[Tuple[int, bytes]]:
        group = f"ring-{self.job_id}"
        rdd = self.context.parallelize(range(spec.size), spec.size).barrier()
        try:
            with _job_group(self.context, group, self.description):
                return rdd.mapPartitions(functools.partial(run_partition, spec)).collect()
        except BaseException as e:
            self.context.cancelJobGroup(group)
            self._stop_ranks(spec)
            if not isinstance(e, Exception):
                raise
            _raise_failure(spec, e)
            raise

    def _stop_ranks(self, spec: JobSpec) -> None:
        """Tells every task still running to stop its rank, and waits (a
        little past the grace period) until the tasks that started have ended."""
        deadline = time.monotonic() + spec.grace + _CLEANUP_SECONDS
        with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
            client.set(spec.key("abort"), b"1")
            for rank in range(spec.size):
                if client.try_get(spec.key("started", rank)) is None:
                    continue
                try:
                    client.get(spec.key("ended", rank), timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    logger.warning("job %s: the task of rank %d did not end in time", spec.job_id, rank)


def _raise_failure(spec: JobSpec, error: Exception) -> None:
    """Raises the error of the ranks that recorded one, else a RuntimeError
    saying why Spark failed the job; ``error`` is Spark's exception."""
    errors = {}
    with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
        for rank in range(spec.size):
            data = client.try_get(spec.key("error", rank))
            if data is not None:
                errors[rank] = _load_error(rank, data)
    if errors:
        raise_first_error(errors)
    raise RuntimeError(f"ring_strategy.spark.run: the Spark job failed: {_spark_reason(error)}") from error


def _load_error(rank: int, data: bytes) -> Tuple[Any, ...]:
    try:
        return tuple(pickle.loads(data))
    except Exception as e:  # noqa: BLE001 - a class the driver cannot import, say
        return ("error", RuntimeError(f"rank {rank} failed; its error cannot be unpickled here: {e}"), "")


def _spark_reason(error: Exception) -> str:
    """The first lines of Spark's message (without the JVM's stack trace)."""
    java = getattr(error, "java_exception", None)
    text = str(java.getMessage()) if java is not None else str(error)
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return "\n".join(lines[:8])


@contextlib.contextmanager
def _job_group(context: Any, group: str, description: str) -> Iterator[None]:
    """Runs the block's Spark jobs in job group ``group`` (cancellable, with
    interruption), then restores the thread's previous job properties."""
    old = {key: context.getLocalProperty(key) for key in _JOB_PROPERTIES}
    context.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    finally:
        for key, value in old.items():
            context.setLocalProperty(key, value)
