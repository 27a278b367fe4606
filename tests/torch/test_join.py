"""hvd.join() with uneven data on real workers."""

import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun

WORKER = Path(__file__).parent / "workers" / "join_uneven.py"


@pytest.mark.parametrize("np_", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_join_with_uneven_batches(np_):
    proc = run_ringrun(np_, [sys.executable, WORKER], timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count(": ok") == np_, out[-4000:]
