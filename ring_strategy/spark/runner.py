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

import functools
import pickle
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ring_strategy.runner.run_fn import reject_unsupported
from ring_strategy.spark.cluster import active_context, start_timeout_seconds, wait_for_slots
from ring_strategy.spark.driver import (
    check_num_proc, forwarded_output, job_fields, job_group, job_store, logger, new_job, raise_failure,
    stop_workers,
)
from ring_strategy.spark.spec import JobSpec
from ring_strategy.spark.task import run_partition

__all__ = ["run"]


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
    context = active_context()
    fields = job_fields(fn, args, kwargs, env, executable, nics, stdout, stderr)
    size = check_num_proc(context, num_proc, verbose)
    timeout = start_timeout_seconds(start_timeout)
    wait_for_slots(context, size, timeout)
    job_id, secret = new_job()
    with job_store(context, secret, job_id) as address:
        spec = JobSpec(job_id=job_id, secret=secret, rendezvous_address=address, size=size,
                       start_timeout=timeout, **fields)
        if verbose >= 2:
            logger.info("job %s: %d ranks, rendezvous at %s", job_id, size, address)
        with forwarded_output(spec, stdout, stderr):
            rows = _run_stage(context, spec, f"ring_strategy.spark.run: {getattr(fn, '__name__', 'fn')} "
                                             f"on {size} ranks")
    return [pickle.loads(data)[1] for _, data in sorted(rows)]


def _run_stage(context: Any, spec: JobSpec, description: str) -> List[Tuple[int, bytes]]:
    """Runs the barrier stage; returns ``(rank, outcome)`` of every rank.
    On a failure, stops what still runs and raises the failure."""
    group = f"ring-{spec.job_id}"
    rdd = context.parallelize(range(spec.size), spec.size).barrier()
    try:
        with job_group(context, group, description):
            return rdd.mapPartitions(functools.partial(run_partition, spec)).collect()
    except BaseException as e:
        context.cancelJobGroup(group)
        stop_workers(spec, range(spec.size))
        if not isinstance(e, Exception):
            raise
        raise_failure(spec, range(spec.size), e)
        raise
