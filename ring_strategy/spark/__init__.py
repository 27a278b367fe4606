"""Spark integration: the ranks of a ring job as the tasks of a Spark barrier stage.

``from ring_strategy.spark import run`` works without pyspark installed;
pyspark is needed when a job runs. See :func:`run`.
"""

from ring_strategy.spark.runner import run

__all__ = ["run"]
