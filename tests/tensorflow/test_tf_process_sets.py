"""Process sets in ring_strategy.tensorflow and keras_callbacks (TensorFlow
backend) on 4 real ranks (tests/tensorflow/workers/tf_process_sets.py):
collectives eagerly and in tf.function, gradients, DistributedGradientTape
and Keras' DistributedOptimizer on a set, and the errors."""

import os
import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun
from tests.workers.checks import passed_ranks

WORKER = Path(__file__).parent / "workers" / "tf_process_sets.py"
SCENARIOS = ["eager_ops", "function_ops", "gradients", "gradient_tape", "keras_optimizer", "errors"]


@pytest.mark.slow  # 12 s of make test's budget; numpy and torch process sets run in make test
def test_process_sets_on_four_ranks():
    base = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    proc = run_ringrun(4, [sys.executable, WORKER, *SCENARIOS], env=env, base=base, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for s in SCENARIOS:
        assert len(passed_ranks(out, s)) == 4, f"{s}:\n{out[-8000:]}"
