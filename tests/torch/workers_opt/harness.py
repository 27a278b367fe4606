"""How the optimizer/functions tests launch their workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WORKERS = Path(__file__).parent


def run(np_: int, args: list, timeout: float = 180) -> subprocess.CompletedProcess:
    """``ringrun -np NP python ARGS`` from the repository root; NP=0 runs plain
    ``python ARGS`` without launcher variables (a world of one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, *map(str, args)]
    if np_:
        cmd = [sys.executable, "-m", "ring_strategy.runner.launch", "-np", str(np_)] + cmd
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} timed out after {timeout} s\n{e.stdout}\n{e.stderr}", pytrace=False)


def check_scenario(proc: subprocess.CompletedProcess, name: str, ranks: int) -> None:
    """Every rank printed "<rank>: <name> ok"."""
    out = proc.stdout + proc.stderr
    for r in range(ranks):
        assert re.search(rf"^(\[{r}\] )?{r}: {name} ok$", proc.stdout, re.M), out[-8000:]
