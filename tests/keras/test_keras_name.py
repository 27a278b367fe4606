"""``import ring_strategy.keras as hvd`` (the name Horovod users look for, as
``horovod.keras``) gives keras_callbacks' objects themselves."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.jobs import REPO_ROOT, job_environment

CHECK = """\
import ring_strategy.keras as hvd
import keras_callbacks
import ring_strategy.keras.callbacks as callbacks
from ring_strategy.keras.elastic import KerasState

assert hvd.__all__ == keras_callbacks.__all__, (hvd.__all__, keras_callbacks.__all__)
different = [n for n in keras_callbacks.__all__ if getattr(hvd, n) is not getattr(keras_callbacks, n)]
assert not different, different
assert callbacks is keras_callbacks.callbacks and hvd.callbacks is keras_callbacks.callbacks
assert hvd.elastic is keras_callbacks.elastic and KerasState is keras_callbacks.elastic.KerasState
assert hvd.DistributedOptimizer is keras_callbacks.optimizer.DistributedOptimizer
print("same objects")
"""


def test_ring_strategy_keras_is_keras_callbacks() -> None:
    env = job_environment({"KERAS_BACKEND": "numpy"})
    proc = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "same objects" in proc.stdout, proc.stdout + proc.stderr
