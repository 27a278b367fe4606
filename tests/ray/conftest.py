"""The local Ray cluster of the Ray tests: two CPUs, started once per test module."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # address="local": a new cluster even where /tmp/ray names another (a run
    # killed before ray.shutdown() leaves its address there).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()
