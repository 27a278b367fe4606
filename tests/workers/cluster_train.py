"""Functions the Ray and Spark tests send to their workers (Ray actors, the
ranks of Spark tasks); each joins the job with ``init()`` as a script would.

The tests pickle this module by value, so the workers need not import it.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

STEPS, ROWS, IN, OUT = 4, 4, 6, 3


def place_and_sum(x: float) -> Dict[str, Any]:
    """Joins the job, reports where this worker sits and sums ``rank + x`` over the ranks."""
    import numpy as np

    import ring_strategy as rs

    rs.init()
    total = rs.allreduce(np.array([rs.rank() + x]), op=rs.Sum)
    return {"rank": rs.rank(), "size": rs.size(), "local_rank": rs.local_rank(), "local_size": rs.local_size(),
            "cross_size": rs.cross_size(), "sum": float(total[0]), "pid": os.getpid(),
            "env_var": os.environ.get("RING_TEST_VALUE"),
            "horovod": [os.environ.get(f"HOROVOD_{k}") for k in ("RANK", "SIZE", "LOCAL_RANK", "CROSS_SIZE")]}


def fail_on(rank: int) -> None:
    """Raises ValueError on ``rank``."""
    import ring_strategy as rs

    rs.init()
    if rs.rank() == rank:
        raise ValueError(f"rank {rank} fails on purpose")


def torch_train(shard: bool = True) -> List[float]:
    """Trains a small model with DistributedOptimizer on this rank's rows of
    each global batch (``shard``), or in one process on the whole batch of two
    ranks; returns the final parameters, flattened."""
    import torch
    import torch.nn.functional as F

    import ring_strategy.torch as hvd

    hvd.init()
    size, rank = (hvd.size(), hvd.rank()) if shard else (2, None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, 8), torch.nn.Tanh(), torch.nn.Linear(8, OUT))
    g = torch.Generator().manual_seed(1234)
    xs, ys = torch.randn(STEPS, size * ROWS, IN, generator=g), torch.randn(STEPS, size * ROWS, OUT, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if shard:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    rows = slice(None) if rank is None else slice(rank * ROWS, (rank + 1) * ROWS)
    for s in range(STEPS):
        opt.zero_grad()
        F.mse_loss(model(xs[s, rows]), ys[s, rows]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def lightning_fit(root_dir: Optional[str] = None) -> Tuple[List[float], List[float]]:
    """Fits a small LightningModule with ``Trainer(strategy="ring", devices=1)``
    (this worker is one rank); returns the initial and final parameters, flattened."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import ring_strategy  # noqa: F401  (registers strategy="ring")

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(IN, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def flat() -> List[float]:
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()

    torch.manual_seed(0)
    model = Net()
    initial = flat()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, IN, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=1, max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=root_dir)
    assert trainer.world_size == 2 and trainer.global_rank == int(os.environ["RING_RANK"])
    trainer.fit(model, DataLoader(data, batch_size=8))
    return initial, flat()
