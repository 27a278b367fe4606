"""Trainer(strategy="ring") on real workers: self-launched (python script.py
with devices=2), under ringrun -np 2, under torchrun --nproc-per-node 2 and
under mpirun -np 2, against a one-process reference fit on the global batch. Each worker process runs every scenario once (see
workers/fit_worker.py); the tests below check what the ranks wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from ring_strategy._contracts import job_shm_paths
from tests.jobs import job_environment, mpirun_command, ringrun_command, run_job

pytest.importorskip("pytorch_lightning")

WORKER = Path(__file__).parent / "workers" / "fit_worker.py"
TIMEOUT = 300
TOLERANCE = 1e-5


def _run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs the job ``cmd`` (stdout and stderr merged) without launcher variables of this process."""
    return run_job(cmd, env=job_environment({"PYTHONUNBUFFERED": "1"}, drop_ring=True), cwd=cwd, timeout=TIMEOUT,
                   merge_output=True)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, out: Path, ranks: int) -> None:
        self.proc = proc
        assert proc.returncode == 0, proc.stdout[-8000:]
        self.ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference")
    return Run(_run([sys.executable, str(WORKER), "--reference", "--out", str(out)], out), out, 1).ranks[0]


@pytest.fixture(scope="module")
def self_launched(tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("self_launched")
    return Run(_run([sys.executable, str(WORKER), "--devices", "2", "--out", str(out)], out), out, 2)


@pytest.fixture(scope="module")
def under_ringrun(tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("ringrun")
    cmd = ringrun_command(2, [sys.executable, WORKER, "--devices", "2", "--out", out])
    return Run(_run(cmd, out), out, 2)


@pytest.fixture(scope="module")
def under_torchrun(tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("torchrun")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           str(WORKER), "--devices", "2", "--out", str(out)]
    return Run(_run(cmd, out), out, 2)


@pytest.fixture(scope="module")
def under_mpirun(tmp_path_factory) -> Run:
    out = tmp_path_factory.mktemp("mpirun")
    cmd = mpirun_command(2, "-x", "PYTHONPATH", sys.executable, WORKER, "--devices", "1", "--out", out)
    return Run(_run(cmd, out), out, 2)


# Lightning under torchrun and mpirun: slow-marked for make test's budget (pytest -m slow);
# tests/lightning/test_strategy.py and tests/cluster/test_launchers.py run both launchers in make test.
@pytest.fixture(params=["self_launched", "under_ringrun", pytest.param("under_torchrun", marks=pytest.mark.slow),
                        pytest.param("under_mpirun", marks=pytest.mark.slow)])
def job(request) -> Run:
    return request.getfixturevalue(request.param)


def _max_diff(a: List[float], b: List[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("scenario", ["auto", "manual"])
def test_parameters_identical_and_equal_to_reference(job, reference, scenario):
    """Accumulation with clipping (auto) and manual optimization with clipping."""
    r0, r1 = (r[scenario] for r in job.ranks)
    assert r0["params"] == r1["params"]
    assert _max_diff(r0["params"], reference[scenario]["params"]) < TOLERANCE
    assert r0["global_step"] == r1["global_step"] == reference[scenario]["global_step"]


def test_checkpoint_save_and_resume(job, reference):
    r0, r1 = (r["checkpoint"] for r in job.ranks)
    ref = reference["checkpoint"]
    for key in ("after_3", "resumed_4"):  # fit twice on one Trainer, then resume in a new one
        assert r0[key] == r1[key]
        assert _max_diff(r0[key], ref[key]) < TOLERANCE, key
    assert r0["global_step"] == ref["global_step"] == 16
    assert r0["files"] == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]


def test_strategy_contract(job, reference):
    for rank, result in enumerate(job.ranks):
        auto = result["auto"]
        assert auto["strategy"] == "RingStrategy" and auto["world_size"] == 2
        assert auto["rank_mean"] == 0.5  # self.log(..., sync_dist=True): the mean over ranks
        assert auto["rank_max"] == 1.0
        assert auto["gathered"] == [[0, 7], [1, 7]]  # all_gather
        assert auto["val_sampler"] == "DistributedSampler"
        assert abs(auto["val_loss"] - reference["auto"]["val_loss"]) < TOLERANCE
        assert abs(auto["test_loss"] - reference["auto"]["test_loss"]) < TOLERANCE
        assert auto["predicted_rows"] == 32  # half of the 64 samples per rank


def test_early_stopping_stops_every_rank_together(job):
    r0, r1 = (r["early_stop"] for r in job.ranks)
    assert r0 == r1  # rank 0 alone wants to stop; everyone stops with it
    assert r0["should_stop"] and r0["stopped_epoch"] == 1 and r0["epoch"] == 2
    assert r0["sampler"] == "DistributedSampler"  # injected by Lightning


def test_self_launch_leaves_nothing_behind(self_launched):
    r0, r1 = self_launched.ranks
    assert r0["job_id"] and r0["job_id"] == r1["job_id"] and r0["job_id"].startswith("pl-")
    assert [r0["horovod_rank"], r1["horovod_rank"]] == ["0", "1"]
    assert not job_shm_paths(r0["job_id"])
    with pytest.raises(ProcessLookupError):
        os.kill(r1["pid"], 0)  # rank 1 has exited (and was reaped by rank 0)
