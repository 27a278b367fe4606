"""Trainer(strategy="ring") beyond Horovod, on two real self-launched workers
(workers/trainer_features_worker.py, one job for both): sync_batchnorm=True
gives batch-norm statistics over the global batch, and
RingStrategy(shard_optimizer_state=True) fits, checkpoints and resumes
bitwise as the unsharded strategy. Also the conversion itself in this process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")
import torch  # noqa: E402

from ring_strategy.lightning import RingStrategy, RingSyncBatchNorm  # noqa: E402
from ring_strategy.torch import SyncBatchNorm  # noqa: E402
from tests.jobs import job_environment, run_job  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "trainer_features_worker.py"
TOLERANCE = 1e-5


def _max_difference(a: list, b: list) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list:
    out = tmp_path_factory.mktemp("trainer_features")
    env = job_environment({"PYTHONUNBUFFERED": "1"}, drop_ring=True)
    proc = run_job([sys.executable, str(WORKER), "--out", str(out)], env=env, cwd=out, timeout=240,
                   merge_output=True)
    assert proc.returncode == 0, proc.stdout[-8000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_sync_batchnorm_statistics_equal_one_process_on_the_global_batch(ranks):
    """At np=2 the running statistics, num_batches_tracked and parameters
    after the fit equal plain torch's trained on the global batch in one
    process (and differ from rank 0's half alone); the layers are ring's
    SyncBatchNorm during the fit and the model's own classes after it."""
    reference, half = ranks[0]["global_batch"], ranks[0]["half_batch"]
    for r, result in enumerate(ranks):
        assert result["ranks"] == 2
        assert result["during_fit"] == ["SyncBatchNorm"], result
        assert result["after_fit"] == ["BatchNorm1d", "BatchNorm2d"], result
        assert result["layer_sync"] == "RingSyncBatchNorm"
        ring = result["ring"]
        assert set(ring) == set(reference)
        for name, values in reference.items():
            assert _max_difference(ring[name], values) < TOLERANCE, (r, name, ring[name], values)
    # The check means something: one rank's batches alone give other statistics.
    assert _max_difference(ranks[0]["ring"]["1.running_mean"], half["1.running_mean"]) > 0.1
    assert _max_difference(ranks[0]["ring"]["5.running_var"], half["5.running_var"]) > 1e-3


def test_sharded_optimizer_state_fits_checkpoints_and_resumes_bitwise(ranks):
    """At np=2, Adam with an LR scheduler: the sharded fit ends bitwise where
    the unsharded one does, its checkpoint holds the same full optimizer
    state, and an epoch resumed from each checkpoint ends bitwise equal."""
    for r, result in enumerate(ranks):
        assert result["sharded"] == {"fit_bitwise": True, "checkpoint_states_equal": True, "resumed_bitwise": True,
                                     "moved": True, "sharded_class": "ShardedOptimizer"}, (r, result["sharded"])


def test_sharded_optimizer_state_clips_bitwise(ranks):
    """gradient_clip_val by norm (clipping active) and by value, with
    accumulation: the sharded fit ends bitwise where the unsharded one does."""
    for r, result in enumerate(ranks):
        assert result["clipped"] == {"norm": True, "value": True}, (r, result["clipped"])


def test_powersgd_compression_keeps_ranks_identical(ranks):
    """RingStrategy(compression=PowerSGD(rank=1, warmup_steps=1)): 8 steps, the
    ranks end bitwise identical, the 9 x 50 weight went as P and Q after the
    warm-up step, biases and the 1 x 9 weight whole."""
    for r, result in enumerate(ranks):
        c = result["compressed"]
        assert c["identical"] and c["moved"] and c["steps"] == 8, (r, c)
        assert c["compressed"] == [True, False, False, False], (r, c)  # 9 x 50 weight, bias, 1 x 9 weight, bias
        assert c["sent_bytes"] < c["dense_bytes"] / 3, (r, c)


def test_sharded_optimizer_state_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="not with shard_optimizer_state=True. Got: compression=PowerSGD"):
        from ring_strategy.torch import PowerSGD

        RingStrategy(shard_optimizer_state=True, compression=PowerSGD())
    with pytest.raises(ValueError, match="Got: shard_optimizer_state='yes'"):
        RingStrategy(shard_optimizer_state="yes")


def test_convert_and_revert_keep_the_tensors():
    """The plugin swaps BatchNorm layers for SyncBatchNorm holding the same
    parameters and buffers (optimizers stay valid), and back."""
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3),
                                torch.nn.Sequential(torch.nn.BatchNorm1d(4).eval()))
    weight, mean = model[1].weight, model[2][0].running_mean
    plugin = RingSyncBatchNorm()
    synced = plugin.apply(model)
    assert isinstance(synced[1], SyncBatchNorm) and isinstance(synced[2][0], SyncBatchNorm)
    assert synced[1].weight is weight and synced[2][0].running_mean is mean and not synced[2][0].training
    back = plugin.revert(synced)
    assert type(back[1]) is torch.nn.BatchNorm2d and type(back[2][0]) is torch.nn.BatchNorm1d
    assert back[1].weight is weight and back[2][0].running_mean is mean and not back[2][0].training


def test_world_of_one_trains_with_batch_norm_and_lightnings_plugin_is_replaced(tmp_path):
    """devices=1: sync_batchnorm=True fits (ring's layers normalize locally)."""
    from torch.utils.data import DataLoader, TensorDataset

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
            self.kinds = set()

        def training_step(self, batch, batch_idx):
            self.kinds.add(type(self.net[1]).__name__)
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    strategy = RingStrategy()
    t = pl.Trainer(strategy=strategy, accelerator="cpu", devices=1, max_epochs=1, sync_batchnorm=True,
                   default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False)
    model = Net()
    t.fit(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    assert t.global_step == 2 and model.kinds == {"SyncBatchNorm"}
    assert type(strategy._layer_sync) is RingSyncBatchNorm and type(model.net[1]) is torch.nn.BatchNorm1d
    assert int(model.net[1].num_batches_tracked) == 2
