"""Soak test: 10,000 steps of 200 allreduced gradients on two ranks.

Run it (outside ``make test``; it takes several minutes per transport) with::

    .venv/bin/python -m pytest -m slow -s tests/soak

``RING_SOAK_STEPS`` (default 10000) and ``RING_SOAK_TENSORS`` (default 200)
shorten or lengthen it. Each rank measures its resident memory, open file
descriptors and the job's /dev/shm entries after the warm-up (a tenth of the
steps, at least 100) and at the end (see soak_worker.py). The promise: RSS
grows by less than 5% after the warm-up, no descriptor or shared-memory
entry leaks, every checked result is right, and nothing is left behind.
The figures are printed (``-s`` shows them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from reliability_jobs import run_job  # noqa: E402

WORKER = Path(__file__).resolve().parent / "soak_worker.py"
STEPS = int(os.environ.get("RING_SOAK_STEPS", "10000"))
TENSORS = int(os.environ.get("RING_SOAK_TENSORS", "200"))
MAX_RSS_GROWTH = 0.05


def _figures(output: str) -> List[Dict[str, float]]:
    """The ``soak {...}`` line of every rank, by rank."""
    lines = [line.split("soak ", 1)[1] for line in output.splitlines() if "] soak {" in line]
    return sorted((json.loads(line) for line in lines), key=lambda f: f["rank"])


def _report(transport: str, figures: List[Dict[str, float]]) -> None:
    for f in figures:
        growth = (f["rss_end"] - f["rss_warm"]) / f["rss_warm"]
        print(f"\nsoak {transport} rank {f['rank']}: {f['steps']} steps x {f['tensors']} tensors in "
              f"{f['seconds']} s ({f['steps_per_second']} steps/s after warm-up); "
              f"RSS {f['rss_warm'] / 2**20:.1f} -> {f['rss_end'] / 2**20:.1f} MiB ({growth:+.2%}); "
              f"fds {f['fds_warm']} -> {f['fds_end']}; /dev/shm entries {f['shm_warm']} -> {f['shm_end']}")


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_soak(transport: str) -> None:
    job = run_job(2, [WORKER, STEPS, TENSORS], env={"RING_TRANSPORT": transport}, timeout=3.5 * 3600)
    assert job.returncode == 0, job.tail()
    figures = _figures(job.output)
    assert [f["rank"] for f in figures] == [0, 1], job.tail()
    _report(transport, figures)
    for f in figures:
        growth = (f["rss_end"] - f["rss_warm"]) / f["rss_warm"]
        assert growth < MAX_RSS_GROWTH, f"rank {f['rank']}: RSS grew {growth:.1%} after the warm-up: {f}"
        assert f["fds_end"] == f["fds_warm"], f"rank {f['rank']}: file descriptors leaked: {f}"
        assert f["shm_end"] == f["shm_warm"] == 0, f"rank {f['rank']}: shared-memory entries: {f}"
    assert job.leftover_processes == [] and job.leftover_segments == []
