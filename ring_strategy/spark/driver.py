"""What the drivers of :func:`ring_strategy.spark.run` and
:func:`ring_strategy.spark.run_elastic` share: checking the arguments, the
job's store, Spark's job group, stopping the workers and raising a failure.

Workers are the ranks of a job (numbered by rank) or the workers of an
elastic job (numbered in the order they joined); the store keys are those of
:mod:`ring_strategy.spark.spec`.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import secrets
import time
from typing import IO, Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Tuple

from ring_strategy._contracts import remove_job_shm
from ring_strategy.environments.network import join_address
from ring_strategy.runner.run_fn import raise_first_error
from ring_strategy.runner.store import StoreClient, StoreServer
from ring_strategy.spark.cluster import driver_addresses
from ring_strategy.spark.output import OutputReader
from ring_strategy.spark.spec import JobSpec

__all__ = [
    "check_num_proc", "forwarded_output", "job_fields", "job_group", "job_store", "logger", "new_job",
    "raise_failure", "stop_workers",
]

logger = logging.getLogger("ring_strategy.spark")

# Seconds past the grace period the driver waits for stopped tasks to clean up.
_CLEANUP_SECONDS = 5.0
_JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def check_num_proc(context: Any, num_proc: Optional[int], verbose: int) -> int:
    """``num_proc``, checked, or ``spark.default.parallelism`` when None."""
    if num_proc is None:
        num_proc = int(context.defaultParallelism)
        if verbose >= 1:
            logger.info("Running %d processes (inferred from spark.default.parallelism)...", num_proc)
    elif isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc should be a positive integer. Got: {num_proc!r}")
    elif verbose >= 1:
        logger.info("Running %d processes...", num_proc)
    return num_proc


def job_fields(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Dict[str, Any]],
               env: Optional[Mapping[str, str]], executable: Optional[str], nics: Any,
               stdout: Optional[IO[str]], stderr: Optional[IO[str]]) -> Dict[str, Any]:
    """The :class:`~ring_strategy.spark.spec.JobSpec` fields that come from
    the caller's arguments, checked (``fn`` and its arguments pickled)."""
    from pyspark import cloudpickle

    if not callable(fn):
        raise TypeError(f"fn should be callable. Got: {fn!r}")
    if env is not None and not isinstance(env, Mapping):
        raise TypeError(f"env should be a mapping of variable names to values. Got: {env!r}")
    if nics is None or isinstance(nics, str):
        nics = () if nics is None else (nics,)
    return dict(payload=cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}))),
                env={str(k): str(v) for k, v in (env or {}).items()}, executable=executable,
                nics=tuple(sorted(nics) if isinstance(nics, (set, frozenset)) else nics),
                capture=tuple(name for name, s in (("stdout", stdout), ("stderr", stderr)) if s is not None))


@contextlib.contextmanager
def job_store(context: Any, secret: bytes, job_id: str) -> Iterator[str]:
    """Serves the job's store where Spark's driver listens; yields the
    address tasks dial. On the way out, stops it and removes the job's
    shared memory on this host (what workers killed here left)."""
    bind, host = driver_addresses(context)
    store = StoreServer(secret, host=bind)
    store.start()
    try:
        port = store.address.rpartition(":")[2]
        yield join_address(host, int(port))
    finally:
        store.stop()
        remove_job_shm(job_id)


@contextlib.contextmanager
def forwarded_output(spec: JobSpec, stdout: Optional[IO[str]], stderr: Optional[IO[str]]) -> Iterator[None]:
    """Writes the workers' captured lines to ``stdout`` / ``stderr`` while the block runs."""
    streams = {name: s for name, s in (("stdout", stdout), ("stderr", stderr)) if s is not None}
    reader = (OutputReader(StoreClient(spec.rendezvous_address, spec.secret), spec.job_id, spec.size, streams)
              if streams else None)
    try:
        yield
    finally:
        if reader is not None:
            reader.stop()


def new_job() -> Tuple[str, bytes]:
    """A fresh job id and secret."""
    return f"spark-{secrets.token_hex(8)}", secrets.token_bytes(32)


@contextlib.contextmanager
def job_group(context: Any, group: str, description: str) -> Iterator[None]:
    """Runs the block's Spark jobs in job group ``group`` (cancellable, with
    interruption), then restores the thread's previous job properties."""
    old = {key: context.getLocalProperty(key) for key in _JOB_PROPERTIES}
    context.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    finally:
        for key, value in old.items():
            context.setLocalProperty(key, value)


def stop_workers(spec: JobSpec, numbers: Iterable[int]) -> None:
    """Tells every task still running to stop its worker (the ``abort`` key),
    and waits, a little past the grace period, until the tasks of ``numbers``
    that started have ended."""
    deadline = time.monotonic() + spec.grace + _CLEANUP_SECONDS
    with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
        client.set(spec.key("abort"), b"1")
        for number in numbers:
            if client.try_get(spec.key("started", number)) is None:
                continue
            try:
                client.get(spec.key("ended", number), timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                logger.warning("job %s: the task of worker %d did not end in time", spec.job_id, number)


def raise_failure(spec: JobSpec, numbers: Iterable[int], error: BaseException) -> None:
    """Raises the error of the workers (of ``numbers``) that recorded one,
    else a RuntimeError saying why the job failed; ``error`` is the cause
    the driver saw (Spark's exception, say)."""
    errors = {}
    with StoreClient(spec.rendezvous_address, spec.secret, timeout=spec.start_timeout) as client:
        for number in numbers:
            data = client.try_get(spec.key("error", number))
            if data is not None:
                errors[number] = _load_error(number, data)
    if errors:
        raise_first_error(errors)
    raise RuntimeError(f"ring_strategy.spark: the job failed: {_reason(error)}") from error


def _load_error(number: int, data: bytes) -> Tuple[Any, ...]:
    try:
        return tuple(pickle.loads(data))
    except Exception as e:  # noqa: BLE001 - a class the driver cannot import, say
        return ("error", RuntimeError(f"worker {number} failed; its error cannot be unpickled here: {e}"), "")


def _reason(error: BaseException) -> str:
    """The first lines of ``error``'s message (Spark's, without the JVM's stack trace)."""
    java = getattr(error, "java_exception", None)
    text = str(java.getMessage()) if java is not None else str(error)
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return "\n".join(lines[:8])
