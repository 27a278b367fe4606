"""The examples run end to end through ringrun."""

from __future__ import annotations

import re
import sys


def test_numpy_logreg_trains_and_keeps_replicas_identical(ringrun):
    result = ringrun(2, [sys.executable, "examples/numpy_logreg.py", "--epochs", "21"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    losses = [float(x) for x in re.findall(r"^\[0\] epoch +\d+ +loss ([\d.]+)$", result.stdout, re.M)]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2], result.stdout
    assert "[0] parameters identical on all 2 workers: True" in result.stdout
    assert not re.search(r"^\[1\] ", result.stdout, re.M)  # only rank 0 reports
