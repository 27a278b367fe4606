"""Spark integration: the ranks of a ring job as the tasks of a Spark stage.

``from ring_strategy.spark import run`` works without pyspark installed;
pyspark is needed when a job runs. See :func:`run` (a barrier stage, one
rank per task) and :func:`run_elastic` (an elastic job, one worker per task).
"""

from ring_strategy.spark.elastic import run_elastic
from ring_strategy.spark.runner import run

__all__ = ["run", "run_elastic"]
