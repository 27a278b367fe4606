"""The fast path for agreed cached allreduces (RING_FAST_PATH=1,
native/engine/fast_path.h) on real ranks: results exact against numpy, and
negotiation again whenever anything changes (shape, dtype, op, a late
rank, a process set, a timeline, a join, a mismatch). Worker:
tests/workers/fast_path.py; the join and mismatch cases are
tests/workers/scenarios.py's, run with the path on."""

import json
import re
import sys
from pathlib import Path

import pytest

from tests.jobs import run_ringrun
from tests.workers.checks import passed_ranks

HERE = Path(__file__).parent
SCENARIOS = ["loop", "values", "changes", "late_rank", "async_and_grouped", "process_set", "timeline", "same_bits"]
LOOP_STEPS = 40  # tests/workers/fast_path.py's
BITS_CASES, BITS_STEPS = 16, 4  # its same_bits scenario's


def run(np_, args, env, timeout=120):
    proc = run_ringrun(np_, [sys.executable, *args], env=env, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    return out


@pytest.mark.parametrize("np_, transport", [(3, "shm"), (2, "tcp")])
def test_agreed_tensors_skip_rank_0_and_every_change_is_negotiated(np_, transport, tmp_path):
    trace = tmp_path / "trace.json"
    env = {"RING_FAST_PATH": "1", "RING_LOG_LEVEL": "trace", "RING_TRANSPORT": transport,
           "RING_DYNAMIC_PROCESS_SETS": "1"}
    out = run(np_, [HERE / "workers" / "fast_path.py", trace, *SCENARIOS], env)
    for s in SCENARIOS:
        assert len(passed_ranks(out, s)) == np_, f"{s}:\n{out[-8000:]}"
    # Rank 0 negotiated 'fp.loop' once (to cache it, which also agrees it),
    # a few times at most when a rank fell behind; the rest went fast.
    negotiated = len(re.findall(r"allreduce of \d+ tensor\(s\), first 'fp\.loop'", out))
    assert negotiated <= np_ * 5, negotiated
    # same_bits: at most half of its steps were negotiated (every rank logs
    # each: the first step's, np_ x BITS_CASES lines); the rest went fast and
    # gave the negotiated bits.
    bits = len(re.findall(r"allreduce of \d+ tensor\(s\), first 'fp\.bits\.", out))
    assert np_ * BITS_CASES <= bits <= np_ * BITS_CASES * BITS_STEPS // 2, bits
    # While rank 0 recorded, 'fp.tl' was negotiated: all three steps are in
    # the trace.
    rows = [e for e in json.loads(trace.read_text() or "[]") if isinstance(e, dict)]
    named = {e.get("args", {}).get("name") for e in rows} | {e.get("name") for e in rows}
    assert "fp.tl" in named, sorted(n for n in named if n)[:20]


@pytest.mark.parametrize("scenario", ["cached_changes", "join"])
def test_mismatch_join_and_fusion_scenarios_with_the_fast_path(scenario):
    out = run(3, [HERE / "workers" / "scenarios.py", scenario], {"RING_FAST_PATH": "1"})
    assert out.count(": ok") == 3, out[-3000:]
