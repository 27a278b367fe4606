"""examples/lightning_mlp.py (what `make demo` runs) end to end, made small."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

REPO = Path(__file__).resolve().parents[2]


def test_lightning_mlp_self_launched(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, str(REPO / "examples" / "lightning_mlp.py"), "--strategy", "ring", "--devices", "2",
           "--hidden", "64", "--num-batches", "6", "--warmup", "2"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                          start_new_session=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert re.search(r"^strategy ring, [\d.]+ M parameters, batch size 32 per worker, 2 worker\(s\)", proc.stdout, re.M), out
    assert re.search(r"^total samples/s on 2 worker\(s\): [\d.]+$", proc.stdout, re.M), out
    assert re.search(r"^parameters identical on all 2 workers: True$", proc.stdout, re.M), out
    assert proc.stdout.count("total samples/s") == 1, out  # only rank 0 reports
