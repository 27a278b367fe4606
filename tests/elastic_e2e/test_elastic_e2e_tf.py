"""Issue 18's acceptance test 1 with the real TensorFlow 2 API
(``hvd.elastic.run``, ``TensorFlowState``, ``DistributedGradientTape`` in one
``tf.function``) under elastic ringrun: e2e_tf_train.py on loopback hosts
127.0.0.x. The step is traced once, in the world of 3, and the same graph
trains on in the world of 2; it holds what must follow the world's size at
each run, not at the trace: an ``IndexedSlices`` gradient reduced with
Average and ``gradient_predivide_factor=2.0``. The job runs once (a module
fixture) and several tests read it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.elastic_e2e import e2e_tf_train as script
from tests.elastic_e2e.e2e_checks import (
    HOSTS, ElasticJob, Finished, check_lost_one_of_three, commits, every_sample_once, finished_equal, printed_reference,
)

EPOCHS, COMMIT_EVERY = 3, 3
STEPS = EPOCHS * script.STEPS_PER_EPOCH
FAIL_STEP = 26  # epoch 1, batch 6: two steps after the commit at step 24
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TRAIN_EPOCHS": str(EPOCHS),
       "TRAIN_COMMIT": str(COMMIT_EVERY), "TRAIN_SLEEP": "0"}
WORKER = Path(script.__file__)
_TRACED = re.compile(r"^\[(\d+)\] traced (\d+)$", re.M)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Finished:
    """Worker 1 of 3 SIGKILLed at step 26."""
    job = ElasticJob(tmp_path_factory.mktemp("killed"), HOSTS, ["-np", 3, "--min-np", 2],
                     env={**ENV, "TRAIN_FAIL": f"1:{FAIL_STEP}:sigkill"}, worker=WORKER)
    return job.finish(timeout=120)


def test_killed_worker_3_to_2(killed):
    """Acceptance 1: the job exits 0, the survivors keep their processes and
    reset once, the failed host gets no new worker, at most one commit
    interval is trained again."""
    check_lost_one_of_three(killed, FAIL_STEP, COMMIT_EVERY, STEPS, "tensorflow: SIGKILL of 1 of 3")


def test_killed_worker_one_trace_ends_at_the_one_process_result(killed):
    """The survivors trained the world of 2 with the graph traced in the
    world of 3, and end bitwise equal, within 1e-5 of one process."""
    run = killed
    assert {int(w): int(n) for w, n in _TRACED.findall(run.output)} == {0: 1, 2: 1}, run.tail()
    finished_equal(run, STEPS, printed_reference(run))


def test_killed_worker_commits_and_samples(killed):
    """Acceptance 5 and 10 across the rollback."""
    steps = [s for s, _, _ in commits(killed)]
    assert steps == list(range(COMMIT_EVERY, STEPS + 1, COMMIT_EVERY)), steps
    every_sample_once(killed, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)
