"""The Spark cluster of the Spark tests: ``local-cluster[2,1,1024]`` (a master,
two workers of one core and two executor JVMs with their Python workers),
started once for the module, every port on loopback, the UI off.

Spark writes the executors' work directories under ``$SPARK_HOME/work``; the
session gets a SPARK_HOME of its own in a temporary directory (links to
pyspark's ``bin``, ``jars`` and ``python``), so nothing is written into the
installed pyspark.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.jobs import job_environment

_FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    pyspark = pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (make sysdeps installs Debian's openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    home = tmp_path_factory.mktemp("spark-home")
    for entry in ("bin", "jars", "python"):
        (home / entry).symlink_to(Path(pyspark.__file__).parent / entry)
    saved = dict(os.environ)
    os.environ.update(job_environment({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                                       "PYSPARK_PYTHON": sys.executable}))
    try:
        session = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("ring-tests")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.sql.shuffle.partitions", "2")
                   # JVMs that start fast: the session starts three (the driver, two executors).
                   .config("spark.driver.extraJavaOptions", _FAST_JVM)
                   .config("spark.executor.extraJavaOptions", _FAST_JVM)
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()
    finally:
        os.environ.clear()
        os.environ.update(saved)
