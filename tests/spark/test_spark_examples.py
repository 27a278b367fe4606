"""The Spark examples as scripts, end to end: each starts its own Spark
(``local[2]``) and takes about 20 s, so they run with ``pytest -m slow``;
tests/spark/test_spark_run.py runs their training functions in its session."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.jobs import REPO_ROOT, job_environment

pytest.importorskip("pyspark")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="no Java runtime (make sysdeps installs one)"),
]


@pytest.mark.parametrize("script, args", [
    ("spark_lightning.py", []),
    ("spark_keras.py", ["--backend", "torch"]),
])
def test_example_trains_and_keeps_replicas_identical(script, args):
    import subprocess

    result = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / script), "--num-proc", "2",
                             "--epochs", "2", *args],
                            env=job_environment({"SPARK_LOCAL_IP": "127.0.0.1"}), capture_output=True,
                            text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "parameters identical on all 2 ranks: True" in result.stdout, result.stdout
