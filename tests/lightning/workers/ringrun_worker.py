"""Under ringrun -np 2, with the Lightning package named on the command line
(``pytorch_lightning`` or ``lightning.pytorch``)::

    ringrun -np 2 python ringrun_worker.py PACKAGE

Prints one line per scenario, in this order (an error ends the engine on
every rank; the next Trainer joins a new one):

1. a fit with devices=1 (one device per process, Horovod's convention):
   the replicas end identical;
2. gradient accumulation in manual optimization done right (every pass but
   the last inside block_backward_sync), and LBFGS (whose closure runs
   several backward passes in one step): the replicas end identical;
3. two averaged backward passes before a step: a clear AssertionError from
   fit on every rank;
4. Trainers that disagree (max_epochs differs): a clear RuntimeError from
   fit on every rank, not a hang.
"""

from __future__ import annotations

import importlib
import os
import sys

import ring_strategy  # noqa: F401  (registers strategy="ring")
import torch
from torch.utils.data import DataLoader, TensorDataset

PACKAGE = sys.argv[1]
pl = importlib.import_module(PACKAGE)
RANK = int(os.environ["RING_RANK"])


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(RANK)  # different on every rank: the broadcast at setup must fix it
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ManualAccumulation(Tiny):
    """Two backward passes per step; only the last one is averaged."""

    def __init__(self, block: bool) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.block = block

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        first, second = batch[0].chunk(2)
        opt.zero_grad()
        if self.block:
            with self.trainer.strategy.block_backward_sync():
                self.manual_backward(self.layer(first).pow(2).mean())
        else:
            self.manual_backward(self.layer(first).pow(2).mean())
        self.manual_backward(self.layer(second).pow(2).mean())
        opt.step()


class Lbfgs(Tiny):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)


def trainer(**kwargs) -> "pl.Trainer":
    settings = dict(devices=1, max_epochs=1)
    settings.update(kwargs)
    return pl.Trainer(strategy="ring", accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **settings)


def same_everywhere(t: "pl.Trainer", model: torch.nn.Module) -> bool:
    weights = t.strategy.all_gather(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return bool((weights[0] == weights[1]).all())


def fit_expecting(error: type, model: "pl.LightningModule", data: DataLoader, **kwargs) -> str:
    try:
        trainer(**kwargs).fit(model, data)
    except error as e:
        return f"error: {e}"
    return "no error"


def main() -> None:
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    model = Tiny()
    t = trainer()
    t.fit(model, data)
    print(f"rank {RANK}: devices=1 world={t.world_size} steps={t.global_step} "
          f"same={same_everywhere(t, model)}", flush=True)

    for name, model in (("manual accumulation", ManualAccumulation(block=True)), ("lbfgs", Lbfgs())):
        t = trainer()
        t.fit(model, data)
        print(f"rank {RANK}: {name} steps={t.global_step} same={same_everywhere(t, model)}", flush=True)

    result = fit_expecting(AssertionError, ManualAccumulation(block=False), data)
    print(f"rank {RANK}: two backward passes: {result}", flush=True)

    result = fit_expecting(RuntimeError, Tiny(), data, devices=2, max_epochs=1 + RANK)
    print(f"rank {RANK}: {result}", flush=True)


if __name__ == "__main__":
    main()
