"""What the driver of a Spark ring job asks its SparkContext: whether there is
one, how many tasks its cluster runs at once, where the driver listens.

A barrier stage starts all its tasks together or not at all, and Spark waits
(up to ten minutes, by default) before failing one that needs more task
slots than the cluster has. :func:`wait_for_slots` fails clearly instead: at
once when the master fixes the number of slots (``local[N]``,
``local-cluster[N,C,M]``), else once ``start_timeout`` has passed without
enough executors registering.
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any, Optional, Tuple

__all__ = [
    "active_context", "driver_addresses", "fixed_slots", "start_timeout_seconds", "task_slots", "wait_for_slots",
]

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]")
# Seconds between two looks at the registered executors.
_POLL_SECONDS = 0.25


def active_context() -> Any:
    """The active ``pyspark.SparkContext``.

    Raises:
        ImportError: If pyspark is not installed.
        RuntimeError: If no SparkContext is running.
    """
    try:
        from pyspark import SparkContext
    except ImportError:
        raise ImportError(
            "ring_strategy.spark needs pyspark: pip install -c constraints.txt 'ring-strategy[spark]'"
        ) from None
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("ring_strategy.spark found no active SparkContext: start a SparkSession "
                           "(or SparkContext) before calling run()")
    return context


def _task_cpus(context: Any) -> int:
    return max(1, int(context.getConf().get("spark.task.cpus", "1")))


def task_slots(context: Any) -> int:
    """The number of tasks the cluster can run at once now (registered executors only)."""
    jsc = context._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))


def fixed_slots(master: str, task_cpus: int = 1) -> Optional[int]:
    """The task slots a local master always has, or None for a cluster whose
    executors come and go (standalone, YARN, Kubernetes).

    Example:
        >>> fixed_slots("local-cluster[2,1,1024]"), fixed_slots("local[4]", task_cpus=2)
        (2, 2)
    """
    match = _LOCAL_CLUSTER.fullmatch(master.strip())
    if match:
        return int(match.group(1)) * (int(match.group(2)) // task_cpus)
    match = _LOCAL.fullmatch(master.strip())
    if match:
        cores = match.group(1) or "1"
        return ((os.cpu_count() or 1) if cores == "*" else int(cores)) // task_cpus
    return None


def wait_for_slots(context: Any, num_proc: int, timeout: float) -> None:
    """Returns once the cluster can run ``num_proc`` tasks at once.

    Raises:
        RuntimeError: If it cannot: at once for a local master with fewer
            slots, else after ``timeout`` seconds; the message gives the count.
    """
    master, cpus = context.master, _task_cpus(context)
    fixed = fixed_slots(master, cpus)
    if fixed is not None and fixed < num_proc:
        raise RuntimeError(_too_few(num_proc, fixed, f"master {master}, spark.task.cpus={cpus}"))
    deadline = time.monotonic() + timeout
    while True:
        slots = task_slots(context)
        if slots >= num_proc:
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(_too_few(num_proc, slots, f"after waiting {timeout:g} s for executors to register "
                                                         "(start_timeout)"))
        time.sleep(_POLL_SECONDS)


def _too_few(num_proc: int, slots: int, why: str) -> str:
    return (f"ring_strategy.spark: num_proc={num_proc} needs {num_proc} task slots at once (a barrier "
            f"stage starts every task together), but the cluster has {slots} ({why})")


def driver_addresses(context: Any) -> Tuple[str, str]:
    """Where the driver's store listens and the address tasks dial: Spark's
    ``spark.driver.bindAddress`` and ``spark.driver.host``, so the store sits
    where the driver's own ports do."""
    conf = context.getConf()
    host = conf.get("spark.driver.host") or "127.0.0.1"
    return conf.get("spark.driver.bindAddress") or host, host


def start_timeout_seconds(start_timeout: Optional[float]) -> float:
    """``start_timeout``, else ``RING_SPARK_START_TIMEOUT`` or
    ``HOROVOD_SPARK_START_TIMEOUT``, else 600 seconds.

    Raises:
        ValueError: If the value is not a positive number; the message quotes it.
    """
    value: Any = start_timeout
    if value is None:
        value = os.environ.get("RING_SPARK_START_TIMEOUT", os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"start_timeout should be a positive number of seconds. Got: {value!r}")
    return seconds
