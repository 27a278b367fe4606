"""How the optimizer/functions tests launch their workers (through :mod:`tests.jobs`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.jobs import job_environment, run_job, run_ringrun

WORKERS = Path(__file__).parent


def run(np_: int, args: list, timeout: float = 180) -> subprocess.CompletedProcess:
    """``ringrun -np NP python ARGS`` from the repository root; NP=0 runs plain
    ``python ARGS`` without launcher variables (a world of one)."""
    if np_:
        return run_ringrun(np_, [sys.executable, *args], timeout=timeout, drop_ring=True)
    return run_job([sys.executable, *args], env=job_environment(drop_ring=True), timeout=timeout)


def check_scenario(proc: subprocess.CompletedProcess, name: str, ranks: int) -> None:
    """Every rank printed "<rank>: <name> ok"."""
    out = proc.stdout + proc.stderr
    for r in range(ranks):
        assert re.search(rf"^(\[{r}\] )?{r}: {name} ok$", proc.stdout, re.M), out[-8000:]
