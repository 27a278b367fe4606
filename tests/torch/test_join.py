"""hvd.join() with uneven data on real workers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "join_uneven.py"
RINGRUN = str(Path(sys.executable).parent / "ringrun")


@pytest.mark.parametrize("np_", [2, 3])
def test_join_with_uneven_batches(np_):
    proc = subprocess.run([RINGRUN, "-np", str(np_), sys.executable, str(WORKER)],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count(": ok") == np_, out[-4000:]
