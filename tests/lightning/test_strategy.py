"""RingStrategy without a job: registration, configuration errors, a world of
one in this process, and mismatched Trainers on two real workers."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

pl = pytest.importorskip("pytorch_lightning")
import torch  # noqa: E402

from ring_strategy.lightning import RingStrategy  # noqa: E402
from ring_strategy.lightning._strategy_mixin import ring_op as _ring_op  # noqa: E402
import ring_strategy.torch as rt  # noqa: E402
from tests.jobs import job_environment, run_job, run_ringrun  # noqa: E402

WORKERS = Path(__file__).parent / "workers"


def _python(code: str) -> subprocess.CompletedProcess:
    """One plain Python process (no job) running ``code``."""
    return subprocess.run([sys.executable, "-c", code], env=job_environment(drop_ring=True), capture_output=True,
                          text=True, timeout=120)


def test_import_registers_ring_before_and_after_lightning():
    """`import ring_strategy` imports neither torch nor Lightning, yet "ring" is
    registered whichever of the two is imported first."""
    first = (
        "import sys, ring_strategy\n"
        "assert not {'torch', 'pytorch_lightning', 'lightning'} & set(sys.modules), sorted(sys.modules)\n"
        "from pytorch_lightning.strategies import StrategyRegistry\n"
        "assert 'ring' in StrategyRegistry\n"
        "s = StrategyRegistry.get('ring')\n"
        "from ring_strategy.lightning import RingStrategy\n"
        "assert type(s) is RingStrategy\n"
        "import importlib, pytorch_lightning.strategies as m\n"
        "importlib.reload(m)\n"  # a reload gets a new, empty registry; the hook fills it again
        "assert 'ring' in m.StrategyRegistry\n"
    )
    second = (
        "import pytorch_lightning\n"
        "from pytorch_lightning.strategies import StrategyRegistry\n"
        "assert 'ring' not in StrategyRegistry\n"
        "import ring_strategy\n"
        "assert 'ring' in StrategyRegistry\n"
        # The unified lightning package (when installed) registers "ring" too. In a fresh
        # interpreter: in this one, pytest's path makes tests/lightning importable as "lightning".
        "try:\n"
        "    import lightning.pytorch\n"
        "except ImportError:\n"
        "    raise SystemExit(0)\n"
        "from lightning.pytorch.strategies import StrategyRegistry, ParallelStrategy\n"
        "s = StrategyRegistry.get('ring')\n"
        "assert isinstance(s, ParallelStrategy), type(s).__mro__\n"
    )
    # Two interpreters side by side: each is mostly the import of Lightning.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for proc in pool.map(_python, [first, second]):
            assert proc.returncode == 0, proc.stderr[-4000:]


def _trainer(**kwargs) -> "pl.Trainer":
    kwargs.setdefault("accelerator", "cpu")
    return pl.Trainer(strategy="ring", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kwargs)


def test_more_devices_than_cpus_is_an_error():
    n = (os.cpu_count() or 1) + 1
    with pytest.raises(ValueError, match=rf"devices={n} is more than the \d+ CPUs.*ringrun -np {n}"):
        _trainer(devices=n)


def test_num_nodes_needs_a_launcher():
    with pytest.raises(ValueError, match="num_nodes=2 needs a launcher"):
        _trainer(devices=1, num_nodes=2)


_RINGRUN_4 = {"RING_RANK": "1", "RING_SIZE": "4", "RING_LOCAL_RANK": "1", "RING_LOCAL_SIZE": "4",
              "RING_CROSS_RANK": "0", "RING_CROSS_SIZE": "1", "RING_RENDEZVOUS_ADDR": "127.0.0.1:29400",
              "RING_SECRET": "ab" * 32, "RING_JOB_ID": "test"}
# Rank 5 of 8 on two hosts of 4, as each launcher describes it.
_TWO_HOSTS = {
    "torchrun": {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
                 "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
    # mpirun across hosts needs the rendezvous named (rank 0's host is unknown to the others)
    "mpirun": {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "RING_RENDEZVOUS_ADDR": "10.0.0.1:29500"},
    "srun": {"SLURM_PROCID": "5", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)",
             "SLURM_NODELIST": "node[1-2]", "SLURM_JOB_ID": "77"},
}


@pytest.mark.parametrize("devices", [1, 4])
def test_under_a_launcher_devices_per_host_or_one(devices):
    with mock.patch.dict(os.environ, _RINGRUN_4):
        t = _trainer(devices=devices)
        assert t.world_size == 4 and t.global_rank == 1 and t.local_rank == 1
        assert t.strategy.distributed_sampler_kwargs == {"num_replicas": 4, "rank": 1}
        assert t.strategy.cluster_environment.creates_processes_externally


@pytest.mark.parametrize("launcher", sorted(_TWO_HOSTS))
def test_under_other_launchers_the_trainer_sees_their_job(launcher):
    with mock.patch.dict(os.environ, _TWO_HOSTS[launcher]):
        for devices, nodes in [(4, 2), (1, 1)]:  # as with DDP, or one device per process as with Horovod
            t = _trainer(devices=devices, num_nodes=nodes)
            assert (t.world_size, t.global_rank, t.local_rank, t.node_rank) == (8, 5, 1, 1), launcher
            assert t.strategy.distributed_sampler_kwargs == {"num_replicas": 8, "rank": 5}
            assert t.strategy.cluster_environment.creates_processes_externally
        with pytest.raises(ValueError, match=r"job of 8 processes \(4 per host on 2 host\(s\)\)"):
            _trainer(devices=2)


def test_under_a_launcher_other_devices_is_an_error():
    with mock.patch.dict(os.environ, _RINGRUN_4):
        with pytest.raises(ValueError, match=r"devices=2, num_nodes=1\) does not match .* 4 processes"):
            _trainer(devices=2)
        with pytest.raises(ValueError, match="use devices=4, num_nodes=1"):
            _trainer(devices=4, num_nodes=2)


def test_devices_other_than_cpu_and_cuda_are_rejected():
    strategy = RingStrategy(parallel_devices=[torch.device("meta")])
    with pytest.raises(ValueError, match="RingStrategy runs on CPUs and CUDA GPUs. Got: .* devices of type meta"):
        strategy._configure_launcher()
    RingStrategy(parallel_devices=[torch.device("cuda", 0)])._check_accelerator()  # one process per GPU


def test_reduce_ops():
    from torch.distributed import ReduceOp

    assert _ring_op(None) == _ring_op("mean") == _ring_op("avg") == _ring_op(ReduceOp.AVG) == rt.Average
    assert _ring_op("sum") == _ring_op(ReduceOp.SUM) == rt.Sum
    assert _ring_op("max") == _ring_op(ReduceOp.MAX) == rt.Max
    assert _ring_op("min") == rt.Min
    with pytest.raises(ValueError, match="reduce_op should be .* Got: 'median'"):
        _ring_op("median")


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("n", torch.tensor(3), sync_dist=True, reduce_fx="sum")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_strategy_instance_world_of_one(tmp_path):
    """RingStrategy() as an instance, devices=1: no worker is started, the
    collectives are the identity with Lightning's shapes."""
    from torch.utils.data import DataLoader, TensorDataset

    strategy = RingStrategy()
    t = pl.Trainer(strategy=strategy, accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path,
                   logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    t.fit(_Tiny(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    assert t.global_step == 2 and "RING_RANK" not in os.environ
    assert strategy.reduce(torch.tensor(2)).dtype == torch.float32
    assert strategy.all_gather(torch.tensor([1.0, 2.0])).shape == (1, 2)
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.reduce_boolean_decision(True) is True
    strategy.barrier()


def _has(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:
        return False


# pytorch_lightning: slow-marked for make test's budget (the same strategy classes on another base).
@pytest.mark.parametrize("package", [pytest.param("pytorch_lightning", marks=pytest.mark.slow), "lightning.pytorch"])
def test_jobs_under_ringrun_fit_and_fail_on_every_rank(package):
    """devices=1 fits, accumulation done right, LBFGS; a second averaged
    backward pass before a step and mismatched Trainers fail on every rank
    with a clear error. With each Lightning package."""
    if not _has(package):
        pytest.skip(f"{package} is not installed")
    result = run_ringrun(2, [sys.executable, WORKERS / "ringrun_worker.py", package], timeout=240, drop_ring=True)
    out = result.stdout + result.stderr[-4000:]
    assert result.returncode == 0, out
    for r in (0, 1):
        # 16 samples, 2 ranks, batch 4: 2 steps each
        assert f"[{r}] rank {r}: devices=1 world=2 steps=2 same=True" in result.stdout, out
        assert f"[{r}] rank {r}: manual accumulation steps=2 same=True" in result.stdout, out
        assert f"[{r}] rank {r}: lbfgs steps=2 same=True" in result.stdout, out
        assert (f"[{r}] rank {r}: two backward passes: error: RingStrategy: a parameter's gradient was "
                "averaged in a second backward pass before the optimizer step") in result.stdout, out
        assert "Trainer(accumulate_grad_batches=N)" in result.stdout and "block_backward_sync()" in result.stdout
        assert (f"[{r}] rank {r}: error: RingStrategy: the ranks' Trainer settings differ: "
                "max_epochs: rank 0=1, rank 1=2") in result.stdout, out


def test_accelerators_other_than_cpu_and_cuda_are_rejected():
    from pytorch_lightning.accelerators import MPSAccelerator

    strategy = RingStrategy(accelerator=MPSAccelerator(), parallel_devices=[torch.device("cpu")])
    with pytest.raises(ValueError, match="accelerator='MPSAccelerator'.*use Trainer\\(accelerator='cpu'\\)"):
        strategy._configure_launcher()


def test_one_rank_failing_ends_the_self_launched_job(tmp_path):
    base = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = run_job([sys.executable, WORKERS / "failing_worker.py"], env=job_environment(base=base, drop_ring=True),
                   cwd=tmp_path, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-8000:]
    # Both ranks write to the same stderr, each line whole.
    assert "\nValueError: rank 1 fails on purpose\n" in out, out[-8000:]
    # rank 0's next collective fails: rank 1 left, a lost peer to rank 0
    assert re.search(r"PeerFailureError\W*: lost rank 1 \(.*pid \d+\): it left the job", out), out[-8000:]
    assert "ring_strategy.lightning: rank 1 exited with code 1" in out, out[-8000:]
