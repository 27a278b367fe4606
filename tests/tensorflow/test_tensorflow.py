"""ring_strategy.tensorflow on two real workers (ringrun -np 2).

One ringrun runs every scenario of workers/tf_worker.py in sequence
(importing TensorFlow is the slow part); each test then checks its
scenario's "<rank>: <scenario> ok" line on both ranks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
WORKER = HERE / "workers" / "tf_worker.py"
SCENARIOS = ["eager_ops", "function_ops", "gradients", "broadcast_helpers", "errors", "gradient_tape"]
_runs: dict = {}


def _run(np_: int = 2, timeout: float = 180) -> str:
    if np_ not in _runs:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        cmd = [sys.executable, "-m", "ring_strategy.runner.launch", "-np", str(np_), sys.executable, str(WORKER),
               *SCENARIOS]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(REPO), text=True, errors="replace")
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # ringrun stops its workers
            out, _ = proc.communicate()
            out += f"\n[timed out after {timeout:g} s]"
        _runs[np_] = f"[ringrun exit code {proc.returncode}]\n{out}"
    return _runs[np_]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario):
    out = _run()
    for rank in range(2):
        assert re.search(rf"^(\[{rank}\] )?{rank}: {scenario} ok\b", out, re.M), f"{scenario}:\n{out[-8000:]}"


def test_exit_code():
    out = _run()
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
