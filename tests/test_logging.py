"""Engine logging: RING_LOG_LEVEL picks the level; every line carries the
time and the rank; errors are logged by every rank that sees them, whatever
the level."""

from __future__ import annotations

import re
import sys

from tests.jobs import run_ringrun

LINE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} ring rank (\d) (trace|debug|info|warning|error)\] ")

STEPS = (
    "import numpy as np, ring_strategy as rs\n"
    "rs.init()\n"
    "for _ in range(3):\n"
    "    rs.allreduce(np.ones(4), name='x')\n"
    "rs.shutdown()\n"
)


def _levels(output: str) -> set:
    return {(int(m.group(1)), m.group(2)) for m in LINE.finditer(output)}


def test_trace_level_logs_every_rank_with_time_and_rank():
    result = run_ringrun(2, [sys.executable, "-c", STEPS], env={"RING_LOG_LEVEL": "trace"})
    assert result.returncode == 0, result.stderr
    levels = _levels(result.stderr)
    for rank in (0, 1):
        assert (rank, "info") in levels and (rank, "trace") in levels, result.stderr
    assert "started: rank 1 of 2" in result.stderr
    assert "allreduce of 1 tensor(s), first 'x'" in result.stderr


def test_default_level_is_quiet():
    result = run_ringrun(2, [sys.executable, "-c", STEPS])
    assert result.returncode == 0, result.stderr
    assert not _levels(result.stderr), result.stderr


def test_errors_are_logged_by_the_rank_that_saw_them():
    code = (
        "import os, numpy as np, ring_strategy as rs\n"
        "rs.init()\n"
        "rs.allreduce(np.ones(4), name='x')\n"
        "if rs.rank() == 1:\n"
        "    os._exit(0)  # exit code 0: ringrun lets rank 0 run on\n"
        "try:\n"
        "    rs.allreduce(np.ones(4), name='y')\n"
        "except rs.RingError:\n"
        "    pass\n"
    )
    result = run_ringrun(2, [sys.executable, "-c", code], env={"RING_LOG_LEVEL": "warning"})
    assert (0, "error") in _levels(result.stderr), result.stderr
    assert "stopped: lost rank 1" in result.stderr, result.stderr


def test_bad_level_is_a_clear_error():
    code = "import ring_strategy as rs\ntry:\n    rs.init()\nexcept rs.BadArgumentError as e:\n    print('error:', e)\n"
    result = run_ringrun(1, [sys.executable, "-c", code], env={"RING_LOG_LEVEL": "loud"})
    assert "RING_LOG_LEVEL should be one of trace, debug, info, warning, error. Got: 'loud'" in result.stdout
