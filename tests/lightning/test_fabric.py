"""Fabric(strategy="ring"): registration in both Fabric packages, and Fabric's
README training loop, collectives, no_backward_sync and save/load on two real
self-launched workers (workers/fabric_worker.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning_fabric")

import ring_strategy  # noqa: E402,F401  (registers strategy="ring")
from tests.jobs import job_environment, ringrun_command, run_job  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "fabric_worker.py"
TOLERANCE = 1e-5


def test_fabric_world_of_one_in_this_process():
    """`import ring_strategy` registers "ring" with lightning_fabric (the
    np=2 test below uses lightning.fabric); devices=1 needs no other process
    and Fabric's collectives keep their shapes."""
    import torch
    from lightning_fabric import Fabric
    from lightning_fabric.strategies import ParallelStrategy

    fabric = Fabric(strategy="ring", accelerator="cpu", devices=1)
    assert type(fabric.strategy).__name__ == "RingFabricStrategy"
    assert isinstance(fabric.strategy, ParallelStrategy)
    fabric.launch()
    model, optimizer = fabric.setup(torch.nn.Linear(2, 1), torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1))
    fabric.backward(model(torch.ones(1, 2)).sum())
    assert model.weight.grad.tolist() == [[1.0, 1.0]]
    with fabric.no_backward_sync(model):
        fabric.backward(model(torch.ones(1, 2)).sum())
    assert fabric.all_reduce(torch.tensor(3), reduce_op="sum").item() == 3
    assert fabric.all_reduce(torch.tensor(3)).dtype == torch.float32
    assert fabric.all_gather(torch.tensor([1.0, 2.0])).shape == (1, 2)
    assert fabric.broadcast({"a": 1}) == {"a": 1}
    fabric.barrier()
    with pytest.raises(ValueError, match="reduce_op should be .* Got: 'median'"):
        fabric.all_reduce(torch.tensor(1.0), reduce_op="median")


def test_fabric_readme_loop_and_collectives_at_np2(tmp_path):
    """Fabric's README loop at np=2, self-launched by fabric.launch() (each
    rank initialised differently, rank 0's weights broadcast by setup), ends
    with the parameters of plain torch on the global batch; all_reduce,
    all_gather, broadcast, barrier, no_backward_sync and save/load behave as
    with DDP."""
    _check_job([sys.executable, str(WORKER), "--out", str(tmp_path)], tmp_path)


@pytest.mark.slow  # the same job under ringrun -np 2 (fabric.launch() then starts nothing)
def test_fabric_under_ringrun(tmp_path):
    _check_job(ringrun_command(2, [sys.executable, WORKER, "--out", tmp_path]), tmp_path)


def _check_job(cmd: list, tmp_path: Path) -> None:
    env = job_environment({"PYTHONUNBUFFERED": "1"}, drop_ring=True)
    proc = run_job(cmd, env=env, cwd=tmp_path, timeout=240, merge_output=True)
    assert proc.returncode == 0, proc.stdout[-8000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    reference = ranks[0]["plain_torch"]
    for r, result in enumerate(ranks):
        assert result["world_size"] == 2 and result["strategy"] == "RingFabricStrategy"
        assert result["base"] == ["lightning.fabric.strategies.parallel"]  # the unified package's Fabric
        assert result["steps"] == 8  # 32 samples, 2 ranks, batch 4, 2 epochs
        assert max(abs(a - b) for a, b in zip(result["params"], reference, strict=True)) < TOLERANCE, r
        assert result["collectives"] == {
            "sum": 3.0, "mean": 1.5, "max_dict": [1, 0], "gathered": [[0, 7], [1, 7]], "broadcast": {"from": 1},
            "decision": True,
        }, r
        assert result["accumulation"]["first_differs_across_ranks"], r
        assert result["accumulation"]["synced_error"] < 1e-6, (r, result["accumulation"])
        assert result["checkpoint"] == {"loaded_params_equal": True, "loaded_momentum_equal": True,
                                        "loaded_steps": 8, "rest": []}, r
