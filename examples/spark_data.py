"""What the Spark examples share: a Spark DataFrame of a synthetic regression
task, written as one part per rank, each rank's part read back, and the
driver's command line and Spark session.

The driver writes the DataFrame with Spark's own CSV writer, repartitioned
into one partition per rank, to a directory every executor can read (this
machine's disk for a local master; a shared mount on a cluster). Rank ``r``
reads part ``r`` with numpy alone, so a rank needs neither Spark nor pandas.
The examples send this module to the ranks by value
(``pyspark.cloudpickle.register_pickle_by_value``), so the executors need
not have it.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np


def regression_frame(spark: Any, rows: int, features: int, seed: int = 0) -> Any:
    """A DataFrame of ``rows`` rows: columns ``x0 ... x<features-1>`` drawn from
    a standard normal, and ``y``, a fixed linear function of them plus noise."""
    from pyspark.sql import functions as F

    xs = [F.randn(seed + i).alias(f"x{i}") for i in range(features)]
    frame = spark.range(rows).select(*xs)
    weights = [((i % 5) - 2) / 2 for i in range(features)]
    label = sum(F.col(f"x{i}") * w for i, w in enumerate(weights)) + F.randn(seed + features) * 0.1
    return frame.withColumn("y", label)


def write_parts(frame: Any, directory: str, parts: int) -> str:
    """Writes ``frame`` to ``directory`` (replacing it) as ``parts`` CSV files,
    one per partition, and returns the directory."""
    frame.repartition(parts).write.mode("overwrite").csv(directory)
    return directory


def read_part(directory: str, rank: int, size: int) -> Tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s part of a frame :func:`write_parts` wrote for ``size`` ranks.

    Returns:
        The features (float32, one row per sample) and the label column.

    Raises:
        ValueError: If the directory does not hold ``size`` parts.
    """
    parts = sorted(glob.glob(os.path.join(directory, "part-*")))
    if len(parts) != size:
        raise ValueError(f"{directory} holds {len(parts)} parts; {size} ranks need one each")
    data = np.loadtxt(parts[rank], delimiter=",", ndmin=2, dtype=np.float32)
    return data[:, :-1], data[:, -1:]


def common_length(length: int) -> int:
    """The fewest rows any rank has (call it on every rank, after ``init()``):
    partitions differ by a few rows, and every rank must take as many steps."""
    import ring_strategy as rs

    return int(rs.allreduce(np.array([length]), op=rs.Min)[0])


def parameters_digest(arrays: Any) -> str:
    """A SHA-256 of the parameters (numpy arrays), to compare the replicas."""
    import hashlib

    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def parser(description: str, lr: float) -> argparse.ArgumentParser:
    """The examples' command line; ``lr`` is the default learning rate."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--master", default=None, help="Spark master (default: local[NUM_PROC])")
    p.add_argument("--num-proc", type=int, default=2, help="ranks, one Spark task each")
    p.add_argument("--data-dir", default=None, help="where the parts go (default: a temporary directory)")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=lr)
    return p


def run_on_spark(args: argparse.Namespace, train: Callable[..., Dict[str, Any]],
                 env: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """Starts a Spark session on ``args.master``, writes the data and runs
    ``train(data_dir, epochs, batch_size, lr)`` on ``args.num_proc`` ranks.

    Returns:
        Each rank's result, by rank.
    """
    from pyspark.sql import SparkSession

    import ring_strategy.spark

    master = args.master or f"local[{args.num_proc}]"
    builder = SparkSession.builder.master(master).appName(os.path.basename(sys.argv[0]))
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the ranks use this Python
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    try:
        data_dir = args.data_dir or os.path.join(tempfile.mkdtemp(prefix="ring-spark-data-"), "parts")
        write_parts(regression_frame(spark, args.rows, args.features), data_dir, args.num_proc)
        return ring_strategy.spark.run(train, args=(data_dir, args.epochs, args.batch_size, args.lr),
                                       num_proc=args.num_proc, env=env)
    finally:
        spark.stop()
