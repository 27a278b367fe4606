"""RayExecutor on a real local Ray cluster (two CPUs, started once for the module).

One executor of two workers serves most tests; the torch and Lightning
trainings run in it, one after the other, as a user's successive calls would.
"""

from __future__ import annotations

import glob
import importlib.util
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ring_strategy.ray import RayExecutor  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import ray_train_functions as fns  # noqa: E402

ray.cloudpickle.register_pickle_by_value(fns)
ray.cloudpickle.register_pickle_by_value(sys.modules["tests.workers.cluster_train"])

_spec = importlib.util.spec_from_file_location(
    "ray_train_example", Path(__file__).resolve().parents[2] / "examples" / "ray_train.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
sys.modules[example.__name__] = example
ray.cloudpickle.register_pickle_by_value(example)


@pytest.fixture(scope="module")
def executor(cluster):
    ex = RayExecutor(num_workers=2, cpus_per_worker=1, env_vars={"RING_TEST_VALUE": "from env_vars"})
    ex.start(executable_cls=fns.Counter, executable_args=[10])
    yield ex
    ex.shutdown()


def test_run_returns_each_rank_result(executor):
    results = executor.run(fns.place_and_sum, args=(1.5,))
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 and r["sum"] == 4.0 for r in results)  # (0 + 1.5) + (1 + 1.5)
    # PACK put both workers on the one node: local ranks, one host, shared memory.
    assert [(r["local_rank"], r["local_size"], r["cross_size"]) for r in results] == [(0, 2, 1), (1, 2, 1)]
    assert {r["env_var"] for r in results} == {"from env_vars"}
    assert [r["horovod"] for r in results] == [["0", "2", "0", "1"], ["1", "2", "1", "1"]]  # horovodrun's names
    assert results[0]["pid"] != results[1]["pid"]
    assert executor.run(fns.place_and_sum, kwargs={"x": 0.0})[1]["sum"] == 1.0  # the job lives on


def test_execute_passes_the_executable(executor):
    assert executor.execute(lambda counter: counter.bump()) == [11, 11]
    assert executor.execute(lambda counter: counter.bump()) == [12, 12]
    assert executor.execute_single(lambda counter: counter.value) == 12


def test_a_failing_worker_raises_its_error(executor):
    with pytest.raises(ValueError, match="rank 1 fails on purpose"):
        executor.run(fns.fail_on, args=(1,))


def test_torch_distributed_optimizer(executor):
    params = executor.run(fns.torch_train)
    assert params[0] == params[1], "replicas differ"
    reference = executor.execute_single(lambda _: fns.torch_train(shard=False))
    assert max(abs(a - b) for a, b in zip(params[0], reference)) < 1e-5


def test_lightning_fit(executor, tmp_path):
    (initial0, final0), (initial1, final1) = executor.run(fns.lightning_fit, kwargs={"root_dir": str(tmp_path)})
    assert len(final0) == 8 * fns.IN + 8 + 8 + 1
    assert initial0 == initial1 and final0 != initial0
    assert final0 == final1, "replicas differ after Trainer.fit"


def test_example_training_function(executor):
    """examples/ray_train.py's function (the script itself would start a second Ray instance)."""
    results = executor.run(example.train, args=(3, 10, 16, 0.01))
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["digest"] == results[1]["digest"]
    losses = results[0]["losses"]
    assert losses == results[1]["losses"] and losses[0] > losses[-1]


def test_shutdown_kills_actors_and_leaves_no_shared_memory(executor):
    """The last test that uses the module's executor: it ends it (two CPUs hold one executor at a time)."""
    actors, group, job_id = list(executor._actors), executor._placement_group, executor.job_id
    executor.shutdown()
    executor.shutdown()  # a second call does nothing
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.node.remote(), timeout=30)
    assert ray.util.placement_group_table(group)["state"] == "REMOVED"
    assert not glob.glob(f"/dev/shm/ring.{job_id}*")
    with pytest.raises(RuntimeError, match="not started"):
        executor.run(fns.place_and_sum, args=(0.0,))
    # The resources are free again: a new executor starts and forms a job.
    with RayExecutor(num_workers=2, start_timeout=30) as again:
        assert [r["sum"] for r in again.run(fns.place_and_sum, args=(0.0,))] == [1.0, 1.0]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="num_workers should be a positive integer. Got: 0"):
        RayExecutor(num_workers=0)
    with pytest.raises(ValueError, match="placement_strategy should be one of .* Got: 'TIGHT'"):
        RayExecutor(num_workers=2, placement_strategy="TIGHT")
    with pytest.raises(ValueError, match="needs use_gpu=True"):
        RayExecutor(num_workers=2, gpus_per_worker=1)
