"""DistributedOptimizer on real workers (ringrun -np 2 and a plain world of
one), and examples/pytorch_synthetic.py end to end.

Each worker script runs once per module; every scenario is its own test."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "workers_opt"))

import optimizer_scenarios  # noqa: E402  (for its scenario names)
from harness import WORKERS, check_scenario, run  # noqa: E402


@pytest.fixture(scope="module")
def two_workers():
    return run(2, [WORKERS / "optimizer_scenarios.py"])


@pytest.fixture(scope="module")
def world_of_one():
    return run(0, [WORKERS / "size_one.py"])


@pytest.mark.parametrize("name", list(optimizer_scenarios.SCENARIOS))
def test_two_workers(two_workers, name):
    check_scenario(two_workers, name, 2)


def test_two_workers_exit_code(two_workers):
    assert two_workers.returncode == 0, (two_workers.stdout + two_workers.stderr)[-8000:]


def test_world_of_one_every_scenario(world_of_one):
    """Size 1: every optimizer and functions scenario (no communication path)."""
    out = world_of_one.stdout + world_of_one.stderr
    assert world_of_one.returncode == 0, out[-8000:]
    assert world_of_one.stdout.count(" ok\n") >= len(optimizer_scenarios.SCENARIOS) + 4, out[-8000:]


@pytest.mark.parametrize("np_", [0, 2])
def test_synthetic_example(np_):
    args = ["examples/pytorch_synthetic.py", "--epochs", "1", "--num-iters", "3", "--num-warmup-iters", "1",
            "--batch-size", "16"]
    proc = run(np_, args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    prefix = r"\[0\] " if np_ else ""
    size = np_ or 1
    assert re.search(rf"^{prefix}total samples/s on {size} worker\(s\): [\d.]+$", proc.stdout, re.M), out
    assert re.search(rf"^{prefix}parameters identical on all {size} workers: True$", proc.stdout, re.M), out
    assert not re.search(r"^\[1\] ", proc.stdout, re.M), out  # only rank 0 reports
