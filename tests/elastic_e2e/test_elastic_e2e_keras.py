"""Issue 18's acceptance test 11 for Keras 3: tests 1 and 3 with
``keras_callbacks.elastic`` (``KerasState``, ``CommitStateCallback``,
``UpdateBatchStateCallback``, ``UpdateEpochStateCallback``, ``run``) under
elastic ringrun, e2e_keras_train.py on loopback hosts 127.0.0.x, the
TensorFlow backend (JAX and torch: slow). Every run ends with bitwise the
same weights on every rank, within 1e-5 of one process on the global
batches; the epoch counter is right after the scale-up (Horovod #2844).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Tuple

import pytest

from tests.elastic_e2e import e2e_keras_train as script
from tests.elastic_e2e.e2e_checks import (
    HOSTS, ElasticJob, Finished, added_host, check_added, check_lost_one_of_three, clean, commits, every_sample_once,
    finished_equal, printed_reference, resets,
)

EPOCHS, COMMIT_EVERY = 3, 3
STEPS = EPOCHS * script.STEPS_PER_EPOCH
FAIL_STEP = 26  # epoch 1, batch 6: two steps after the commit at step 24
WORKER = Path(script.__file__)
_EPOCH_BEGIN = re.compile(r"^\[(\d+)\] epoch begin world (\d+) state (\d+) fit (\d+)$", re.M)
_FINAL_EPOCH = re.compile(r"^\[(\d+)\] final epoch (\d+)$", re.M)
BACKENDS = ["tensorflow", pytest.param("jax", marks=pytest.mark.slow), pytest.param("torch", marks=pytest.mark.slow)]


def _env(backend: str, **more: str) -> Dict[str, str]:
    return {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1",
            "TRAIN_EPOCHS": str(EPOCHS), "TRAIN_COMMIT": str(COMMIT_EVERY), "TRAIN_SLEEP": "0.03", **more}


@pytest.fixture(scope="module", params=BACKENDS)
def killed(request, tmp_path_factory) -> Tuple[Finished, str]:
    """Worker 1 of 3 SIGKILLed at step 26; the backend."""
    job = ElasticJob(tmp_path_factory.mktemp("killed"), HOSTS, ["-np", 3, "--min-np", 2],
                     env=_env(request.param, TRAIN_FAIL=f"1:{FAIL_STEP}:sigkill"), worker=WORKER)
    return job.finish(timeout=150), request.param


@pytest.fixture(scope="module", params=BACKENDS)
def added(request, tmp_path_factory) -> Tuple[Finished, float, str]:
    """A third host listed once rank 0 has made 4 steps on two; when; the backend."""
    env = _env(request.param, TRAIN_SLEEP="0.07")
    return (*added_host(tmp_path_factory.mktemp("added"), WORKER, env, at_step=4), request.param)


def _finished_equal(run: Finished) -> None:
    finished_equal(run, STEPS, printed_reference(run))
    assert {int(e) for _, e in _FINAL_EPOCH.findall(run.output)} == {EPOCHS}, run.tail()


def _commits_strictly_increase(run: Finished) -> None:
    """Acceptance 5: a commit every 3 batches, counted from the last one
    (the batches after the last commit of training are not committed)."""
    steps = [s for s, _, _ in commits(run)]
    assert steps == list(range(COMMIT_EVERY, STEPS, COMMIT_EVERY)), steps


def test_killed_worker_3_to_2(killed):
    run, backend = killed
    check_lost_one_of_three(run, FAIL_STEP, COMMIT_EVERY, STEPS, f"keras ({backend}): SIGKILL of 1 of 3")
    _finished_equal(run)
    _commits_strictly_increase(run)
    every_sample_once(run, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)


# 15 s of make test's budget: slow-marked (pytest -m slow); growth runs in make test on torch
# (test_elastic_e2e_torch.py) and Keras' shrinking above.
@pytest.mark.slow
def test_host_added_2_to_3(added):
    run, added_at, backend = added
    reset_step = check_added(run, added_at, f"keras ({backend})")
    # Horovod #2844: right after the scale-up every rank, the new one too,
    # goes on with the epoch of the reset, numbered the same by fit and the state.
    epoch = reset_step // script.STEPS_PER_EPOCH
    first = {}
    for worker, world, state_epoch, fit_epoch in _EPOCH_BEGIN.findall(run.output):
        if int(world) == 2:
            first.setdefault(int(worker), (int(state_epoch), int(fit_epoch)))
    assert first == {w: (epoch, epoch) for w in (0, 1, 2)}, first
    _finished_equal(run)
    _commits_strictly_increase(run)
    every_sample_once(run, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)
    clean(run)


@pytest.mark.slow  # 13 s of make test's budget
def test_replacement_commits_with_the_survivor(tmp_path):
    """A failed worker replaced on a free slot: the survivor, rolled back to
    its last commit, and the newcomer count the batches to the next commit
    from the same point, so they commit (a collective) at the same batch."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 2, "--min-np", 1],
                     env=_env("tensorflow", TRAIN_FAIL=f"1:{FAIL_STEP}:sigkill"), worker=WORKER)
    run = job.finish(timeout=90)
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == [(0, HOSTS[0]), (2, HOSTS[2])], run.tail()
    assert resets(run)[0] == [24], resets(run)
    _finished_equal(run)
    _commits_strictly_increase(run)
    clean(run)
