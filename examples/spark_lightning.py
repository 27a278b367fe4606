"""PyTorch Lightning on Spark: each rank is a Spark task, ``Trainer(strategy="ring")`` in it.

The driver makes a Spark DataFrame (a synthetic regression task: features
``x0..x15``, label ``y``), writes it as one part per rank
(``examples/spark_data.py``) and runs :func:`train` on ``--num-proc`` Spark
tasks with ``ring_strategy.spark.run``. Each rank reads its own partition,
fits the same small model with ``Trainer(strategy="ring", devices=1)`` (this
process is one rank of the job) and returns its loss and a digest of its
parameters; the driver prints them and checks that the replicas agree.

On this machine (Spark ``local[N]``, the data in a temporary directory)::

    python examples/spark_lightning.py --num-proc 2

On a cluster, with a directory every executor can read::

    python examples/spark_lightning.py --master spark://host:7077 --num-proc 4 --data-dir /shared/ring-data
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any, Dict

import pyspark
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_data  # noqa: E402

pyspark.cloudpickle.register_pickle_by_value(spark_data)  # the executors need not have it


class Regressor(pl.LightningModule):
    """features -> 32 -> 1, mean squared error, SGD."""

    def __init__(self, features: int, lr: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("loss", loss, sync_dist=True, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def train(data_dir: str, epochs: int, batch_size: int, lr: float) -> Dict[str, Any]:
    """One rank: runs in a process its Spark task started."""
    import ring_strategy as rs
    from torch.utils.data import DataLoader, TensorDataset

    rs.init()
    torch.set_num_threads(1)
    x, y = spark_data.read_part(data_dir, rs.rank(), rs.size())
    n = spark_data.common_length(len(x))
    torch.manual_seed(0)  # the same initial model everywhere (Trainer also broadcasts rank 0's)
    model = Regressor(x.shape[1], lr)
    # The data is this rank's already: no DistributedSampler on top of it.
    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=1, max_epochs=epochs,
                         use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tempfile.mkdtemp(prefix="ring-spark-lightning-"))
    trainer.fit(model, DataLoader(TensorDataset(torch.from_numpy(x[:n]), torch.from_numpy(y[:n])),
                                  batch_size=batch_size, drop_last=True))
    return {"rank": rs.rank(), "rows": n, "loss": float(trainer.callback_metrics["loss"]),
            "digest": spark_data.parameters_digest(p.detach().numpy() for p in model.parameters())}


def main() -> None:
    args = spark_data.parser(__doc__.splitlines()[0], lr=0.05).parse_args()
    results = spark_data.run_on_spark(args, train)
    for r in results:
        print(f"rank {r['rank']}: {r['rows']} rows, final loss {r['loss']:.4f}", flush=True)
    same = len({r["digest"] for r in results}) == 1
    print(f"parameters identical on all {len(results)} ranks: {same}", flush=True)


if __name__ == "__main__":
    main()
