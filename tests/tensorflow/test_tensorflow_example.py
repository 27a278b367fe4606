"""examples/tensorflow_synthetic.py runs under ringrun -np 2 and keeps the
replicas identical (the example asserts it)."""

from __future__ import annotations

import sys

from tests.jobs import REPO_ROOT, run_ringrun


def test_tensorflow_synthetic_example():
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    proc = run_ringrun(2, [sys.executable, REPO_ROOT / "examples" / "tensorflow_synthetic.py", "--steps", "60"],
                       env=env, timeout=180, drop_ring=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "60 steps in" in out, out[-6000:]
