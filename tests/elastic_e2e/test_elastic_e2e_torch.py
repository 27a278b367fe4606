"""Issue 18's acceptance tests 1, 3, 5 and 10 with the real PyTorch API
(``hvd.elastic.run``, ``TorchState``, ``ElasticSampler``, ``commit()``) under
elastic ringrun: e2e_torch_train.py on loopback hosts 127.0.0.x listed by a
discovery script that prints a file the test rewrites. Every run must end
with the same parameters on every rank, within 1e-5 of one process
training on the global batches. Each job runs once (a module fixture) and
several tests read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.elastic_e2e import e2e_torch_train as script
from tests.elastic_e2e.e2e_checks import (
    HOSTS, ElasticJob, Finished, added_host, check_added, check_lost_one_of_three, clean, commits, every_sample_once,
    finished_equal, pids, resets, timings,
)

EPOCHS, COMMIT_EVERY = 3, 3
STEPS = EPOCHS * script.STEPS_PER_EPOCH
FAIL_STEP = 26  # epoch 1, batch 6: two steps after the commit at step 24
ENV = {"TRAIN_EPOCHS": str(EPOCHS), "TRAIN_COMMIT": str(COMMIT_EVERY), "TRAIN_SLEEP": "0.03"}
WORKER = Path(script.__file__)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Finished:
    """Worker 1 of 3 SIGKILLed at step 26."""
    job = ElasticJob(tmp_path_factory.mktemp("killed"), HOSTS, ["-np", 3, "--min-np", 2],
                     env={**ENV, "TRAIN_FAIL": f"1:{FAIL_STEP}:sigkill"}, worker=WORKER)
    return job.finish()


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """A third host listed once rank 0 has made 4 steps on two."""
    return added_host(tmp_path_factory.mktemp("added"), WORKER, {**ENV, "TRAIN_EPOCHS": "4", "TRAIN_SLEEP": "0.05"},
                      at_step=4)


def _commits_strictly_increase(run: Finished, epochs: int) -> None:
    """Acceptance 5: rank 0's commits go up one interval at a time, none
    lost or repeated, and the final step count is the steps trained."""
    steps = [s for s, _, _ in commits(run)]
    assert steps == list(range(COMMIT_EVERY, epochs * script.STEPS_PER_EPOCH + 1, COMMIT_EVERY)), steps


def test_killed_worker_3_to_2(killed):
    """Acceptance 1: the job exits 0, the survivors keep their processes and
    reset once, the failed host gets no new worker, at most one commit
    interval is trained again."""
    check_lost_one_of_three(killed, FAIL_STEP, COMMIT_EVERY, STEPS, "torch: SIGKILL of 1 of 3")
    finished_equal(killed, STEPS, script.reference(EPOCHS).numpy())


def test_killed_worker_commits_strictly_increase(killed):
    _commits_strictly_increase(killed, EPOCHS)


def test_killed_worker_sampler_trains_every_sample_once(killed):
    """Acceptance 10 across a rollback: the steps trained again take the same samples."""
    every_sample_once(killed, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)


def test_host_added_2_to_3(added):
    """Acceptance 3: the new host's worker is in the world by the first
    commit after discovery lists it, and takes rank 0's parameters."""
    run, added_at = added
    check_added(run, added_at, "torch")
    finished_equal(run, 4 * script.STEPS_PER_EPOCH, script.reference(4).numpy())
    clean(run)


def test_host_added_commits_strictly_increase(added):
    _commits_strictly_increase(added[0], 4)


def test_host_added_sampler_mid_epoch_trains_every_sample_once(added):
    """Acceptance 10: the sampler goes from 2 to 3 ranks mid-epoch; every sample once per epoch."""
    run, _ = added
    (reset_step,) = set(sum(resets(run).values(), []))
    assert reset_step % script.STEPS_PER_EPOCH != 0, f"the reset at step {reset_step} is not mid-epoch"
    every_sample_once(run, script.SAMPLES, 4, script.STEPS_PER_EPOCH)


@pytest.mark.slow  # two more jobs; make test re-shards from 4 ranks onto 2 in tests/torch/test_sharded_optimizer.py
def test_sharded_optimizer_state_reshards_3_to_2_and_2_to_3(tmp_path):
    """DistributedOptimizer(shard_optimizer_state=True) in TorchState: a lost
    worker's world (3 to 2) and a joined one (2 to 3) go on from the commit,
    re-sharded for the new size (the joined worker takes rank 0's), to the
    same parameters as one process."""
    env = {**ENV, "TRAIN_SHARDED": "1"}
    (tmp_path / "killed").mkdir()
    (tmp_path / "added").mkdir()
    job = ElasticJob(tmp_path / "killed", HOSTS, ["-np", 3, "--min-np", 2],
                     env={**env, "TRAIN_FAIL": f"1:{FAIL_STEP}:sigkill"}, worker=WORKER)
    killed = job.finish()
    check_lost_one_of_three(killed, FAIL_STEP, COMMIT_EVERY, STEPS, "torch sharded: SIGKILL of 1 of 3")
    finished_equal(killed, STEPS, script.reference(EPOCHS).numpy())
    run, added_at = added_host(tmp_path / "added", WORKER, {**env, "TRAIN_EPOCHS": "4", "TRAIN_SLEEP": "0.05"},
                               at_step=4)
    check_added(run, added_at, "torch sharded")
    finished_equal(run, 4 * script.STEPS_PER_EPOCH, script.reference(4).numpy())
    clean(run)


@pytest.mark.slow  # one more job; make test checks PowerSGD in tests/torch/test_powersgd.py
def test_powersgd_added_worker_takes_rank_0s_compression_state(tmp_path):
    """DistributedOptimizer(compression=PowerSGD(...)): a worker that joins after
    the warm-up takes rank 0's step count and Qs with the sync, so every rank
    compresses the same tensors from the next step and all end identical."""
    run, added_at = added_host(tmp_path, WORKER, {**ENV, "TRAIN_EPOCHS": "2", "TRAIN_SLEEP": "0.05",
                                                  "TRAIN_POWERSGD": "1"}, at_step=6)
    check_added(run, added_at, "torch powersgd")
    done = run.done()
    assert done and {s for _, s, _ in done.values()} == {2 * script.STEPS_PER_EPOCH}, run.tail()
    assert len({hex_ for _, _, hex_ in done.values()}) == 1, f"ranks disagree: {done}\n{run.tail()}"
    clean(run)


@pytest.mark.slow  # 8 s of make test's budget; make test removes hosts in tests/elastic
def test_host_removed_with_rank_local_sampler_records(tmp_path):
    """A host no longer listed (3 ranks to 2, only removed: the loop may skip
    the sync) while the sampler holds each rank's own records
    (``record_indices``): the ranks still sync them, so the rest of the epoch
    is split over the same samples on every rank: every sample once per
    epoch. The removed worker exits 0; nothing is rolled back."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2],
                     env={**ENV, "TRAIN_SLEEP": "0.05", "TRAIN_RECORD": "indices"}, worker=WORKER)
    job.wait_progress(4, size=3)
    job.set_hosts(HOSTS[:2])
    job.wait_progress(0, size=2)
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == list(zip([0, 1], HOSTS)), run.tail()
    assert "worker 2 on 127.0.0.3 left the job (exited with code 0)" in run.output, run.tail()
    assert "blacklisted" not in run.output and "caught" not in run.output, run.tail()
    (reset_step,) = set(sum(resets(run).values(), []))
    assert reset_step % script.STEPS_PER_EPOCH != 0, f"the reset at step {reset_step} is not mid-epoch"
    every_sample_once(run, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)
    finished_equal(run, STEPS, script.reference(EPOCHS).numpy())
    clean(run)


@pytest.mark.slow
@pytest.mark.parametrize("fail, survivors, error", [
    ("1:26:raise", [0, 2], "PeerFailureError"),  # acceptance 2
    ("0:26:sigkill", [1, 2], "PeerFailureError"),  # acceptance 8: worker 1 becomes rank 0
    # Acceptance 7, the victim stopped between two collectives: a stall.
    ("1:26:stop", [0, 2], "RingTimeoutError"),
])
def test_failed_worker_variants(tmp_path, fail, survivors, error):
    """The victim raises, is rank 0, or is stopped (before it submits its
    gradients: the others see it as a stall, ended after 3 s with
    RING_STALL_SHUTDOWN_TIME_SECONDS): the survivors roll back to the commit
    after step 24 in their own processes and train on to the one-process
    result."""
    stall = {"RING_STALL_CHECK_TIME_SECONDS": "1", "RING_STALL_SHUTDOWN_TIME_SECONDS": "3"}
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], env={**ENV, "TRAIN_FAIL": fail, **stall},
                     worker=WORKER)
    run = job.finish()
    assert run.returncode == 0, run.tail()
    assert [w for w, _ in run.worlds()[2]] == survivors, run.tail()
    assert resets(run) == {w: [24] for w in survivors}, resets(run)
    for w in survivors:
        assert pids(run)[w] == [run.started()[w][1]] * 2, f"worker {w} changed process: {pids(run)}"
    finished_equal(run, STEPS, script.reference(EPOCHS).numpy())
    timings(run, survivors, 2, f"torch: {fail}", error=error)
    every_sample_once(run, script.SAMPLES, EPOCHS, script.STEPS_PER_EPOCH)
    clean(run)
