"""An elastic RayExecutor job (``min_workers``, ``max_workers``) on a real
local Ray cluster: an actor killed while training, the others go on without
it; resources freed while training, the job grows into them.

The training is ``tests/elastic/elastic_train.py``'s least squares, written
as an elastic script (``ring_strategy.elastic.run`` and an ``ObjectState``
committed after every step), so the survivors must end within 1e-5 of one
process training on the same global batches.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ring_strategy.ray import RayExecutor  # noqa: E402

import tests.workers.cluster_elastic as elastic_fns  # noqa: E402
from tests.workers.cluster_elastic import elastic_least_squares, elastic_train, growing_least_squares  # noqa: E402

for _module in (elastic_train, elastic_fns, sys.modules[__name__]):  # the workers need not import the tests
    ray.cloudpickle.register_pickle_by_value(_module)

STEPS, VICTIM, FAIL_AT = 30, 1, 10


def test_actor_killed_job_goes_on_with_the_others(cluster):
    blocker = ray.remote(num_cpus=0.5)(Blocker).remote()  # no room for a replacement actor
    ray.get(blocker.ping.remote())
    executor = RayExecutor(num_workers=3, cpus_per_worker=0.5, min_workers=2)  # 3 actors on the cluster's 2 CPUs
    executor.start()
    try:
        pids = executor.run(os.getpid)
        results = executor.run(elastic_least_squares, args=(STEPS, VICTIM, FAIL_AT))
        assert [r["pid"] for r in results] == [pids[0], pids[2]], results  # the survivors, in their own processes
        assert [(r["rank"], r["size"], r["steps"]) for r in results] == [(0, 2, STEPS), (1, 2, STEPS)], results
        assert [r["worlds"] for r in results] == [[3, 2], [3, 2]], results  # one reset
        assert results[0]["w"] == results[1]["w"], results
        got = np.frombuffer(bytes.fromhex(results[0]["w"]), np.float32)
        np.testing.assert_allclose(got, elastic_train.reference(STEPS), rtol=0, atol=1e-5)
        assert executor.run(os.getpid) == [pids[0], pids[2]]  # later calls run on the survivors
    finally:
        executor.shutdown()
        ray.kill(blocker)


def test_elastic_arguments_are_checked():
    for kwargs, message in (({"min_workers": 0}, "min_workers should be an integer from 1 to num_workers=2"),
                            ({"min_workers": 3}, "min_workers should be an integer from 1 to num_workers=2"),
                            ({"max_workers": 2}, "max_workers=2 needs min_workers"),
                            ({"min_workers": 1, "max_workers": 1}, "at least num_workers=2. Got: 1"),
                            ({"min_workers": 1, "max_workers": 2.5}, "at least num_workers=2. Got: 2.5")):
        with pytest.raises(ValueError, match=message):
            RayExecutor(num_workers=2, **kwargs)


class Blocker:
    def ping(self) -> None:
        return None


def test_job_grows_into_freed_resources(cluster):
    blocker = ray.remote(num_cpus=1)(Blocker).remote()  # the cluster's second CPU
    ray.get(blocker.ping.remote())
    executor = RayExecutor(num_workers=2, cpus_per_worker=0.5, min_workers=1, max_workers=3)
    executor.start()
    try:
        pids = executor.run(os.getpid)
        assert len(pids) == 2  # no room for the spare yet
        results = executor.run(growing_least_squares, args=(STEPS, FAIL_AT, lambda: ray.kill(blocker), 3))
        assert [r["pid"] for r in results[:2]] == pids, results  # the first two, in their own processes
        assert [(r["rank"], r["size"], r["steps"]) for r in results] == [(0, 3, STEPS), (1, 3, STEPS),
                                                                        (2, 3, STEPS)], results
        assert [r["worlds"] for r in results] == [[2, 3], [2, 3], [3]], results  # one reset; the spare joined
        assert len({r["w"] for r in results}) == 1, results
        got = np.frombuffer(bytes.fromhex(results[0]["w"]), np.float32)
        np.testing.assert_allclose(got, elastic_train.reference(STEPS), rtol=0, atol=1e-5)
        grown = results[0]["times"][3] - results[0]["times"]["freed"]
        print(f"resources freed -> training in a world of 3 ranks: {grown:.2f} s")
        assert executor.run(os.getpid)[:2] == pids  # later calls run on all three
    finally:
        executor.shutdown()
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 2  # the actors, the spares and the group are gone
