"""ring_strategy.torch collectives on real worker processes launched by ringrun.

One ringrun per world size runs every scenario of workers/torch_ops.py in
sequence (starting torch in each worker is the slow part); each test then
checks its scenario's "<rank>: <scenario> ok" line on every rank.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]
WORKER = HERE / "workers" / "torch_ops.py"
SCENARIOS = ["allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "grads",
             "compression", "errors", "deprecation", "misc"]
SIZES = [1, 2, 3]
_runs = {}


def _run_all(np_: int, timeout: float = 240) -> str:
    """Output of every scenario at world size np_ (run once per module)."""
    if np_ not in _runs:
        env = dict(os.environ)
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
@pytest.mark.parametrize("np_", SIZES)
def test_scenario(np_, scenario):
    out = _run_all(np_)
    oks = [line for line in out.splitlines() if line.endswith(f": {scenario} ok")]
    assert len(oks) == np_, f"{scenario} at np={np_}:\n{out[-8000:]}"


@pytest.mark.parametrize("np_", SIZES)
def test_workers_exit_cleanly(np_):
    out = _run_all(np_)
    assert out.startswith("[ringrun exit code 0]"), out[-8000:]
    assert "FAILED" not in out and "Traceback" not in out, out[-8000:]
