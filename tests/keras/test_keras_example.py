"""examples/keras_synthetic.py runs under ringrun -np 2 (TensorFlow backend:
the quickest to start; the fit tests cover the other backends)."""

from __future__ import annotations

import sys

from tests.jobs import REPO_ROOT, run_ringrun


def test_keras_synthetic_example():
    env = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    proc = run_ringrun(2, [sys.executable, REPO_ROOT / "examples" / "keras_synthetic.py", "--samples", "512",
                           "--epochs", "1"], env=env, timeout=180, drop_ring=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "final loss" in out, out[-6000:]
