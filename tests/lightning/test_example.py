"""examples/lightning_mlp.py (what `make demo` runs) end to end, made small."""

from __future__ import annotations

import re
import sys

import pytest

from tests.jobs import REPO_ROOT, job_environment, run_job

pytest.importorskip("pytorch_lightning")


def test_lightning_mlp_self_launched(tmp_path):
    cmd = [sys.executable, REPO_ROOT / "examples" / "lightning_mlp.py", "--strategy", "ring", "--devices", "2",
           "--hidden", "64", "--num-batches", "6", "--warmup", "2"]
    proc = run_job(cmd, env=job_environment(drop_ring=True), cwd=tmp_path, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert re.search(r"^strategy ring, [\d.]+ M parameters, batch size 32 per worker, 2 worker\(s\)", proc.stdout, re.M), out
    assert re.search(r"^total samples/s on 2 worker\(s\): [\d.]+$", proc.stdout, re.M), out
    assert re.search(r"^parameters identical on all 2 workers: True$", proc.stdout, re.M), out
    assert proc.stdout.count("total samples/s") == 1, out  # only rank 0 reports
