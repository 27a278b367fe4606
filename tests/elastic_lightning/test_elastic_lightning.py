"""Elastic ``Trainer.fit`` (``RingStrategy(elastic=True)``) under elastic ``ringrun``.

Real jobs of workers/lightning_elastic_fit.py on loopback "hosts" 127.0.0.x,
listed by a discovery script that prints a file the test rewrites
(tests/elastic/elastic_jobs.py). Each test checks what the driver decided,
that the survivors kept their processes, that training went on from the
last commit with ``global_step`` and the epoch right, and that every rank
ends with the same parameters, within 1e-5 of one process training on the
same global batches; nothing may be left behind.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

pytest.importorskip("pytorch_lightning")

sys.path.insert(0, str(Path(__file__).parent / "workers"))
import lightning_elastic_fit as fit  # noqa: E402

from tests.elastic.elastic_jobs import ElasticJob, Finished, params  # noqa: E402
from tests.jobs import job_environment, run_job, run_ringrun  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "lightning_elastic_fit.py"
HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
_LINE = re.compile(r"^\[(\d+)\] (start|done) worker (\w+) pid (\d+) rank (\d+) size (\d+) step (\d+) epoch (\d+)"
                   r"(?: at ([\d.]+))? params ([0-9a-f]+)$", re.M)
_FIRST = re.compile(r"^\[(\d+)\] first step size (\d+) at ([\d.]+)$", re.M)
_VICTIM = re.compile(r"^\[\d+\] victim worker \w+ pid \d+ failing at ([\d.]+) step (\d+)$", re.M)


def _lines(run: Finished, kind: str) -> List[Dict[str, object]]:
    keys = ("worker", "pid", "rank", "size", "step", "epoch")
    return [dict(zip(keys, map(int, (m[1], *m.groups()[3:8]))), at=float(m[9] or 0), params=m[10])
            for m in _LINE.finditer(run.output) if m[2] == kind]


def _clean(run: Finished) -> None:
    assert run.leftover_processes == [], f"{run.leftover_processes}\n{run.tail()}"
    assert run.leftover_segments == [], run.leftover_segments


def _finished_equal(run: Finished, workers: List[int], batches: List[List[int]], epochs: int) -> None:
    """The ``workers`` finished with the same parameters, global_step and epoch,
    and the parameters of one process trained on ``batches``."""
    done = {d["worker"]: d for d in _lines(run, "done")}
    assert sorted(done) == workers, run.tail()
    assert {d["params"] for d in done.values()} == {done[workers[0]]["params"]}, f"ranks disagree:\n{run.tail()}"
    assert {(d["step"], d["epoch"]) for d in done.values()} == {(len(batches), epochs)}, run.tail()
    np.testing.assert_allclose(params(str(done[workers[0]]["params"])), fit.reference(batches).numpy(),
                               rtol=0, atol=1e-5)


# sharded: RingStrategy(shard_optimizer_state=True), whose commit is re-sharded from 3 ranks onto 2.
@pytest.mark.parametrize("sharded", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_worker_killed_mid_epoch_3_to_2(tmp_path: Path, sharded: bool) -> None:
    """Worker 1 is SIGKILLed in the middle of epoch 1: the others roll back to
    the last commit, re-form, and fit completes on them."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2],
                     env={"TRAIN_FAIL": "1:9", "TRAIN_SHARDED": str(int(sharded))}, worker=WORKER)
    run = job.finish(timeout=120)
    assert run.returncode == 0, run.tail()
    assert run.worlds() == {1: list(zip([0, 1, 2], HOSTS)), 2: [(0, HOSTS[0]), (2, HOSTS[2])]}, run.tail()
    assert sorted(run.started()) == [0, 1, 2], "the failed host got a new worker:\n" + run.tail()
    starts = _lines(run, "start")
    for w in (0, 2):
        pids = [s["pid"] for s in starts if s["worker"] == w]
        assert pids == [run.started()[w][1]] * 2, f"worker {w} changed process: {pids}"
    restarted = [s for s in starts if s["size"] == 2]
    assert len(restarted) == 2 and len({(s["step"], s["epoch"], s["params"]) for s in restarted}) == 1, run.tail()
    m = _VICTIM.search(run.output)
    assert m is not None, run.tail()
    failed_at, failed_step = float(m[1]), int(m[2])
    # Committed every COMMIT_EVERY steps (not at an epoch's last batch, which
    # is not at stake here): at most that many steps are trained again.
    resumed = int(restarted[0]["step"])
    assert failed_step - fit.COMMIT_EVERY <= resumed <= failed_step and restarted[0]["epoch"] == 1, restarted
    recovered = max(float(m[3]) for m in _FIRST.finditer(run.output) if m[2] == "2")
    print(f"lightning: sigkill of 1 of 3 at step {failed_step}: resumed from step {resumed}, first step "
          f"of the new world {recovered - failed_at:.3f} s after the failure")
    assert recovered - failed_at < 15.0, run.tail()
    batches = fit.global_batches(3, lambda step: 3 if step < resumed else 2)
    _finished_equal(run, [0, 2], batches, epochs=3)
    _clean(run)


@pytest.mark.slow  # the failure path of the mid-epoch kill above; slow-marked for make test's budget
def test_worker_killed_in_validation_after_an_epoch(tmp_path: Path) -> None:
    """Worker 1 is SIGKILLed in the validation that ends epoch 1: the others go
    back to the commit before the epoch's last batch (the last batch of an
    epoch is not committed), train it again in the new world and go on."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], env={"TRAIN_FAIL": "1:val1"}, worker=WORKER)
    run = job.finish(timeout=120)
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == [(0, HOSTS[0]), (2, HOSTS[2])], run.tail()
    restarted = [s for s in _lines(run, "start") if s["size"] == 2]
    assert {(s["step"], s["epoch"]) for s in restarted} == {(11, 1)}, restarted  # epoch 1 ends at step 12
    assert "in eval mode" not in run.output, run.tail()
    _finished_equal(run, [0, 2], fit.global_batches(3, lambda step: 3 if step < 11 else 2), epochs=3)
    _clean(run)


@pytest.mark.slow  # 11 s of make test's budget; growth is tested at make test on torch (tests/elastic_e2e)
def test_host_added_2_to_3(tmp_path: Path) -> None:
    """A host the discovery script starts listing gets a worker, which joins at
    the next commit with rank 0's state; training goes on with three."""
    job = ElasticJob(tmp_path, HOSTS[:2], ["-np", 2, "--max-np", 3], worker=WORKER,
                     env={"TRAIN_EPOCHS": "1000", "TRAIN_SLEEP": "0.05", "TRAIN_STOP": "3:6"})
    job.wait_progress(4, size=2, timeout=60)
    added_at = time.time()
    job.set_hosts(HOSTS)
    run = job.finish(timeout=120)
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == list(zip([0, 1, 2], HOSTS)), run.tail()
    joined = [s for s in _lines(run, "start") if s["size"] == 3]
    assert sorted(s["worker"] for s in joined) == [0, 1, 2], run.tail()
    assert len({(s["step"], s["epoch"], s["params"]) for s in joined}) == 1, f"the new rank's state differs:\n{run.tail()}"
    joined_step = int(joined[0]["step"])
    print(f"lightning: host added, every rank in world 2 at step {joined_step}, "
          f"{max(float(s['at']) for s in joined) - added_at:.3f} s after the discovery file changed")
    assert "blacklisted" not in run.output, run.tail()
    steps, size_at = joined_step + 6, (lambda step: 2 if step < joined_step else 3)
    epochs = next(n for n in range(1, 100) if len(fit.global_batches(n, size_at)) >= steps)
    # Stopped in the middle of an epoch (should_stop): Lightning counts that epoch as done.
    _finished_equal(run, [0, 1, 2], fit.global_batches(epochs, size_at)[:steps], epochs=epochs)
    _clean(run)


def test_elastic_fit_under_plain_ringrun_equals_the_plain_fit() -> None:
    """Under plain ``ringrun -np 2`` (no elastic options) an elastic fit trains
    bitwise what a fit without elastic does."""
    proc = run_ringrun(2, [sys.executable, WORKER, "tag"], env={"TRAIN_PLAIN": "1"}, timeout=120, drop_ring=True,
                       merge_output=True)
    assert proc.returncode == 0, proc.stdout[-6000:]
    elastic = set(re.findall(r"^\[\d\] done worker .* params ([0-9a-f]+)$", proc.stdout, re.M))
    plain = set(re.findall(r"^\[\d\] plain params ([0-9a-f]+)$", proc.stdout, re.M))
    assert len(elastic) == 1 and elastic == plain, proc.stdout[-6000:]
    np.testing.assert_allclose(params(elastic.pop()), fit.reference(fit.global_batches(3, lambda step: 2)).numpy(),
                               rtol=0, atol=1e-5)


_BAD_INPUT = """
import ring_strategy, pytorch_lightning as pl, torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
from ring_strategy.lightning import RingStrategy
for bad in (0, 1.5, True):
    try:
        RingStrategy(elastic=True, commit_every_n_steps=bad)
    except ValueError as e:
        print("commit_every_n_steps", bad, e)

class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = TensorDataset(torch.randn(8, 2))
loader = DataLoader(data, batch_size=2, sampler=WeightedRandomSampler([1.0] * 8, 8))
trainer = pl.Trainer(strategy=RingStrategy(elastic=True), accelerator="cpu", devices=1, max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False)
try:
    trainer.fit(Net(), loader)
except ValueError as e:
    print("sampler", e)
"""


def test_bad_input_is_a_clear_error() -> None:
    """A bad commit interval, and a training sampler that cannot be split elastically."""
    proc = run_job([sys.executable, "-c", _BAD_INPUT], env=job_environment(drop_ring=True), timeout=120,
                   merge_output=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for bad in ("0", "1.5", "True"):
        assert f"commit_every_n_steps {bad} RingStrategy: commit_every_n_steps should be a positive integer. " \
               f"Got: {bad}" in proc.stdout, proc.stdout[-4000:]
    assert "sampler RingStrategy(elastic=True): the training DataLoader should have a batch_size and" in proc.stdout
    assert "Got: sampler WeightedRandomSampler, batch_size 2" in proc.stdout, proc.stdout[-4000:]


@pytest.mark.slow
def test_rank0_killed(tmp_path: Path) -> None:
    """The next-oldest worker becomes rank 0 and fit goes on from its commit."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], env={"TRAIN_FAIL": "0:9"}, worker=WORKER)
    run = job.finish(timeout=120)
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == [(1, HOSTS[1]), (2, HOSTS[2])], run.tail()
    restarted = [s for s in _lines(run, "start") if s["size"] == 2]
    assert {(s["worker"], s["rank"]) for s in restarted} == {(1, 0), (2, 1)}, restarted
    resumed = int(restarted[0]["step"])
    assert 9 - fit.COMMIT_EVERY <= resumed <= 9, restarted
    _finished_equal(run, [1, 2], fit.global_batches(3, lambda step: 3 if step < resumed else 2), epochs=3)
    _clean(run)


@pytest.mark.slow
def test_host_removed(tmp_path: Path) -> None:
    """A host no longer listed: its worker leaves at the next commit with status 0,
    nothing is rolled back, and the others train on."""
    job = ElasticJob(tmp_path, HOSTS, ["-np", 3, "--min-np", 2], worker=WORKER,
                     env={"TRAIN_EPOCHS": "1000", "TRAIN_SLEEP": "0.05", "TRAIN_STOP": "2:6"})
    job.wait_progress(4, size=3, timeout=60)
    job.set_hosts(HOSTS[:2])
    run = job.finish(timeout=120)
    assert run.returncode == 0, run.tail()
    assert run.worlds()[2] == list(zip([0, 1], HOSTS)), run.tail()
    assert "worker 2 on 127.0.0.3 left the job (exited with code 0)" in run.output, run.tail()
    assert "blacklisted" not in run.output, run.tail()
    restarted = [s for s in _lines(run, "start") if s["size"] == 2]
    assert sorted(s["worker"] for s in restarted) == [0, 1], run.tail()
    changed = int(restarted[0]["step"])
    steps, size_at = changed + 6, (lambda step: 3 if step < changed else 2)
    epochs = next(n for n in range(1, 100) if len(fit.global_batches(n, size_at)) >= steps)
    _finished_equal(run, [0, 1], fit.global_batches(epochs, size_at)[:steps], epochs=epochs)
    _clean(run)
