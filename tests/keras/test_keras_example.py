"""examples/keras_synthetic.py runs under ringrun -np 2 (TensorFlow backend:
the quickest to start; the fit tests cover the other backends)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_keras_synthetic_example():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, "-m", "ring_strategy.runner.launch", "-np", "2", sys.executable,
           str(REPO / "examples" / "keras_synthetic.py"), "--samples", "512", "--epochs", "1"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "final loss" in out, out[-6000:]
