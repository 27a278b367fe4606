"""ring_strategy.spark.run and run_elastic on a real Spark
(``local-cluster[2,1,1024]``, one session for the module): each rank is a
task of a barrier stage on its own executor (each elastic worker a task of an
ordinary stage), and runs in a child process of the task's Python worker.
"""

from __future__ import annotations

import functools
import glob
import importlib
import io
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

import pytest

pyspark = pytest.importorskip("pyspark")

import ring_strategy.spark as rsp  # noqa: E402
import tests.workers.cluster_elastic as elastic_fns  # noqa: E402
import tests.workers.cluster_train as fns  # noqa: E402
from ring_strategy.runner.run_fn import RemoteTraceback  # noqa: E402
from ring_strategy.spark.cluster import fixed_slots  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
spark_data = importlib.import_module("spark_data")
lightning_example = importlib.import_module("spark_lightning")
keras_example = importlib.import_module("spark_keras")

# The ranks need not import the tests or the examples.
for _module in (fns, elastic_fns, elastic_fns.elastic_train, sys.modules[__name__], spark_data, lightning_example,
                keras_example):
    pyspark.cloudpickle.register_pickle_by_value(_module)


def test_numpy_allreduce_results_in_rank_order(spark):
    out, err = io.StringIO(), io.StringIO()
    results = rsp.run(fns.place_and_sum, args=(1.5,), num_proc=2, env={"RING_TEST_VALUE": "from env"},
                      stdout=out, stderr=err)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 and r["sum"] == 4.0 for r in results)  # (0 + 1.5) + (1 + 1.5)
    # Both executors run on this host: one host, local ranks, shared memory.
    assert [(r["local_rank"], r["local_size"], r["cross_size"]) for r in results] == [(0, 2, 1), (1, 2, 1)]
    assert [r["horovod"] for r in results] == [["0", "2", "0", "1"], ["1", "2", "1", "1"]]
    assert {r["env_var"] for r in results} == {"from env"}
    assert results[0]["pid"] != results[1]["pid"]
    # num_proc defaults to spark.default.parallelism (2 executor cores); a later job reuses the Python workers.
    assert [r["sum"] for r in rsp.run(fns.place_and_sum, kwargs={"x": 0.0})] == [1.0, 1.0]
    assert out.getvalue() == "" and err.getvalue() == ""
    lines = io.StringIO()
    rsp.run(_say, num_proc=2, stdout=lines)
    assert sorted(lines.getvalue().splitlines()) == ["[0] rank 0 says hello", "[1] rank 1 says hello"]


def _say() -> None:
    import sys

    import ring_strategy as rs

    rs.init()
    print(f"rank {rs.rank()} says hello")
    print("to stderr, which stays in the executor's log", file=sys.stderr)


def _train_and_reference():
    """This rank's parameters after training on its shard, and the same
    training in this process alone on the whole batch."""
    return fns.torch_train(), fns.torch_train(shard=False)


def test_torch_distributed_optimizer_equals_one_process(spark):
    (params0, reference), (params1, _) = rsp.run(_train_and_reference, num_proc=2)
    assert params0 == params1, "replicas differ"
    assert max(abs(a - b) for a, b in zip(params0, reference)) < 1e-5


def _fail_before_init(directory: str) -> None:
    """Rank 1 raises once rank 0 has said who it is; rank 0 then waits in
    ``init()`` for a peer that never comes (the engine cannot see it fail)."""
    import ring_strategy as rs

    rank = int(os.environ["RING_RANK"])
    with open(os.path.join(directory, f"rank{rank}"), "w") as f:
        f.write(f"{os.getpid()} {os.environ['RING_JOB_ID']}")
    if rank == 1:
        while not os.path.exists(os.path.join(directory, "rank0")):
            time.sleep(0.05)
        raise ValueError("rank 1 fails on purpose")
    rs.init()


def test_a_failing_rank_fails_the_job_with_its_traceback_and_leaves_nothing(spark, tmp_path):
    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 fails on purpose") as raised:
        rsp.run(_fail_before_init, args=(str(tmp_path),), num_proc=2, start_timeout=120)
    assert time.monotonic() - start < 30
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback) and str(cause).startswith("rank 1:\nTraceback")
    assert "in _fail_before_init" in str(cause)
    pids, job_ids = zip(*((int(p), j) for p, j in (f.read_text().split() for f in sorted(tmp_path.iterdir()))))
    assert len(set(job_ids)) == 1
    assert not [pid for pid in pids if _alive(pid)]
    assert not _processes_of(job_ids[0])
    assert not glob.glob(f"/dev/shm/ring.{job_ids[0]}*")
    # The session is fine afterwards.
    assert [r["rank"] for r in rsp.run(fns.place_and_sum, args=(0.0,), num_proc=2)] == [0, 1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _processes_of(job_id: str) -> list:
    """Live processes whose environment names ``job_id``."""
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(environ, "rb") as f:
                if f"RING_JOB_ID={job_id}".encode() in f.read().split(b"\0"):
                    found.append(environ)
        except OSError:
            continue
    return [e for e in found if _alive(int(e.split("/")[2]))]


def test_more_ranks_than_task_slots_is_a_clear_error(spark):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"num_proc=3 needs 3 task slots at once .* the cluster has 2"):
        rsp.run(fns.place_and_sum, args=(0.0,), num_proc=3)
    assert time.monotonic() - start < 5


def test_arguments_are_checked(spark):
    with pytest.raises(ValueError, match="num_proc should be a positive integer. Got: 0"):
        rsp.run(fns.place_and_sum, num_proc=0)
    with pytest.raises(ValueError, match="start_timeout should be a positive number of seconds. Got: -1"):
        rsp.run(fns.place_and_sum, num_proc=1, start_timeout=-1)
    with pytest.raises(TypeError, match="fn should be callable"):
        rsp.run("train.py", num_proc=1)
    with pytest.raises(NotImplementedError, match="does not support extra_mpi_args, use_mpi"):
        rsp.run(fns.place_and_sum, num_proc=1, extra_mpi_args="-x A", use_mpi=True)


def test_nics_name_the_interface_ranks_advertise(spark):
    results = rsp.run(fns.place_and_sum, args=(0.0,), num_proc=2, nics=["no-such-nic0", "lo"])
    assert [r["sum"] for r in results] == [1.0, 1.0]  # lo, the first of them this host has
    with pytest.raises(OSError, match="none of the network interfaces no-such-nic0 has an IPv4 address"):
        rsp.run(fns.place_and_sum, args=(0.0,), num_proc=2, nics={"no-such-nic0"})


def test_fixed_slots_of_local_masters():
    assert fixed_slots("local-cluster[2,1,1024]") == 2
    assert fixed_slots("local-cluster[3, 4, 512]", task_cpus=2) == 6
    assert fixed_slots("local") == 1 and fixed_slots("local[4]") == 4 and fixed_slots("local[4,2]") == 4
    assert fixed_slots("local[*]") == os.cpu_count()
    assert fixed_slots("spark://master:7077") is None and fixed_slots("yarn") is None


@pytest.fixture(scope="module")
def parts(spark, tmp_path_factory):
    """The examples' DataFrame, written as one part per rank for 2 ranks."""
    frame = spark_data.regression_frame(spark, rows=512, features=16)
    return spark_data.write_parts(frame, str(tmp_path_factory.mktemp("spark-data") / "parts"), 2)


@pytest.mark.slow  # the examples cost 20 s of make test's budget
def test_lightning_example_trains_on_each_ranks_partition(spark, parts):
    """examples/spark_lightning.py's function in this session (the script starts its own Spark:
    tests/spark/test_spark_examples.py runs it, slow-marked)."""
    results = rsp.run(lightning_example.train, args=(parts, 2, 32, 0.05), num_proc=2)
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["rows"] == results[1]["rows"] > 200  # each its own part of 512 rows
    assert results[0]["digest"] == results[1]["digest"], "replicas differ"
    assert results[0]["loss"] == results[1]["loss"] < 2.0  # from about 8.5: it learns


@pytest.mark.slow
def test_keras_example_trains_on_each_ranks_partition(spark, parts):
    """examples/spark_keras.py's function in this session, on Keras's torch backend."""
    results = rsp.run(keras_example.train, args=(parts, 3, 32, 0.02), num_proc=2, env={"KERAS_BACKEND": "torch"})
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["digest"] == results[1]["digest"], "replicas differ"
    losses = results[0]["losses"]
    assert losses == results[1]["losses"] and losses[0] > losses[-1]


STEPS, FAIL_AT = 30, 10


def test_elastic_job_goes_on_without_a_lost_worker(spark):
    results = rsp.run_elastic(elastic_fns.elastic_least_squares, args=(STEPS, 1, FAIL_AT), num_proc=2,
                              min_num_proc=1, start_timeout=60, elastic_timeout=60)
    assert [(r["rank"], r["size"], r["steps"], r["worlds"]) for r in results] == [(0, 1, STEPS, [2, 1])], results
    got = np.frombuffer(bytes.fromhex(results[0]["w"]), np.float32)
    np.testing.assert_allclose(got, elastic_fns.elastic_train.reference(STEPS), rtol=0, atol=1e-5)


def _hold_slot(path: str) -> int:
    """A task that holds its slot until ``path`` is removed."""
    while os.path.exists(path):
        time.sleep(0.05)
    return 0


def _running_tasks(spark) -> int:
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
    return sum(stage.numActiveTasks for stage in stages if stage is not None)


def test_elastic_job_grows_when_a_task_slot_frees_up(spark, tmp_path):
    """max_num_proc=2 tasks on a cluster whose second slot another job holds:
    the job starts with one worker; rank 0 ends the other job at step FAIL_AT,
    the second task starts, and its worker joins the next world."""
    blocker = tmp_path / "blocker"
    blocker.touch()
    holder = threading.Thread(target=lambda: spark.sparkContext.parallelize([str(blocker)], 1)
                              .map(_hold_slot).collect())
    holder.start()
    try:
        deadline = time.monotonic() + 30
        while not _running_tasks(spark) and time.monotonic() < deadline:  # until the holder's task runs
            time.sleep(0.05)
        results = rsp.run_elastic(elastic_fns.growing_least_squares,
                                  args=(STEPS, FAIL_AT, functools.partial(os.remove, str(blocker)), 2),
                                  num_proc=1, max_num_proc=2, start_timeout=60, elastic_timeout=60)
    finally:
        if blocker.exists():
            blocker.unlink()
        holder.join()
    assert [(r["rank"], r["size"], r["steps"]) for r in results] == [(0, 2, STEPS), (1, 2, STEPS)], results
    assert [r["worlds"] for r in results] == [[1, 2], [2]], results  # one reset; the second worker joined
    assert results[0]["w"] == results[1]["w"], results
    got = np.frombuffer(bytes.fromhex(results[0]["w"]), np.float32)
    np.testing.assert_allclose(got, elastic_fns.elastic_train.reference(STEPS), rtol=0, atol=1e-5)
    grown = results[0]["times"][2] - results[0]["times"]["freed"]
    print(f"task slot freed -> training in a world of 2 ranks: {grown:.2f} s")


def test_elastic_arguments_are_checked(spark):
    for kwargs, message in (({"min_num_proc": 3}, r"min_num_proc <= num_proc <= max_num_proc .* Got: 3, 2, 2"),
                            ({"max_np": 1}, r"Got: 2, 2, 1"),
                            ({"min_np": 0}, "min_num_proc should be a positive integer. Got: 0"),
                            ({"reset_limit": -1}, "reset_limit should be a non-negative integer. Got: -1"),
                            ({"elastic_timeout": 0}, "elastic_timeout should be a positive number")):
        with pytest.raises(ValueError, match=message):
            rsp.run_elastic(elastic_fns.elastic_least_squares, num_proc=2, **kwargs)
