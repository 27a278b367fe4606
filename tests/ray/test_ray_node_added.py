"""An elastic RayExecutor job grows onto a Ray node started while it trains
(issue: RayExecutor(min_workers=, max_workers=) follows Ray's capacity).

A local cluster of one node with one CPU (ray.cluster_utils.Cluster, real
raylets) holds two workers of 0.5 CPU; the third waits as a spare. At step
``FREE_AT`` rank 0 asks for a node, this process starts a second one (one
CPU), the spare is placed there and joins the next world.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from ring_strategy.ray import RayExecutor  # noqa: E402

import tests.workers.cluster_elastic as elastic_fns  # noqa: E402
from tests.workers.cluster_elastic import elastic_train, growing_least_squares  # noqa: E402

for _module in (elastic_train, elastic_fns, sys.modules[__name__]):  # the workers need not import the tests
    ray.cloudpickle.register_pickle_by_value(_module)

STEPS, FREE_AT = 30, 10


class Flag:
    """A file rank 0 creates to ask for a node (the actor and this process share the disk)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self) -> None:
        open(self.path, "w").close()


@pytest.fixture(scope="module")
def one_node_cluster():
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    ray.init(address=cluster.address, log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_job_grows_onto_a_node_added_while_training(one_node_cluster, tmp_path):
    flag = tmp_path / "add-node"
    executor = RayExecutor(num_workers=2, cpus_per_worker=0.5, min_workers=1, max_workers=3)
    executor.start()
    outcome = {}

    def train() -> None:  # Ray's node start wants the main thread: the job runs beside it
        try:
            outcome["results"] = executor.run(growing_least_squares, args=(STEPS, FREE_AT, Flag(flag), 3))
        except BaseException as e:  # noqa: BLE001 - raised below
            outcome["error"] = e

    job = threading.Thread(target=train, daemon=True)
    try:
        job.start()
        deadline = time.monotonic() + 120
        while not flag.exists() and job.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flag.exists(), outcome
        asked = time.time()
        one_node_cluster.add_node(num_cpus=1)
        job.join(timeout=180)
        assert not job.is_alive() and "error" not in outcome, outcome
    finally:
        executor.shutdown()
    results = outcome["results"]
    assert [(r["rank"], r["size"], r["steps"]) for r in results] == [(0, 3, STEPS), (1, 3, STEPS),
                                                                    (2, 3, STEPS)], results
    assert [r["worlds"] for r in results] == [[2, 3], [2, 3], [3]], results
    got = np.frombuffer(bytes.fromhex(results[0]["w"]), np.float32)
    np.testing.assert_allclose(got, elastic_train.reference(STEPS), rtol=0, atol=1e-5)
    grown = results[0]["times"][3] - asked
    print(f"node asked for -> training in a world of 3 ranks: {grown:.2f} s (the node's start included)")
