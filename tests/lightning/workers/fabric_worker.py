"""Lightning Fabric with strategy="ring" on two self-launched workers.

    python fabric_worker.py --out DIR       # fabric.launch() starts rank 1

Runs the training loop of Fabric's README (setup, setup_dataloaders,
backward, optimizer step) on synthetic images, then Fabric's collectives,
no_backward_sync and save/load, and writes DIR/rank<R>.json with what each
rank saw. Rank 0 also trains the same model in plain torch (no Fabric, no
ring) on the whole global batch, for the parameters to be compared.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List

import ring_strategy  # noqa: F401  (registers strategy="ring")
import torch
from lightning.fabric import Fabric

SAMPLES, BATCH, EPOCHS, LR = 32, 4, 2, 0.05  # BATCH per worker


def dataset() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(11)
    return torch.utils.data.TensorDataset(torch.randn(SAMPLES, 3, 8, 8, generator=g),
                                          torch.randint(0, 4, (SAMPLES,), generator=g))


def network() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 4))


def flat(model: torch.nn.Module) -> List[float]:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).double().tolist()


def readme_loop(fabric: Fabric) -> Dict[str, Any]:
    """Fabric's README example, with a small model and synthetic data."""
    torch.manual_seed(100 + fabric.global_rank)  # each rank its own init: setup must broadcast rank 0's
    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    dataloader = torch.utils.data.DataLoader(dataset(), batch_size=BATCH)
    dataloader = fabric.setup_dataloaders(dataloader)
    model.train()
    losses = []
    for epoch in range(EPOCHS):
        for batch in dataloader:
            inputs, labels = batch
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, labels)
            fabric.backward(loss)
            optimizer.step()
            losses.append(float(loss.data))
    return {"model": model, "optimizer": optimizer, "params": flat(model), "steps": len(losses)}


def plain_torch() -> List[float]:
    """One process on the global batch (rank 0's and rank 1's batches together)."""
    torch.manual_seed(100)
    model, (x, y) = network(), dataset().tensors
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(EPOCHS):
        for start in range(0, SAMPLES, 2 * BATCH):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[start:start + 2 * BATCH]), y[start:start + 2 * BATCH]).backward()
            optimizer.step()
    return flat(model)


def collectives(fabric: Fabric) -> Dict[str, Any]:
    rank = fabric.global_rank
    one = torch.tensor(float(rank + 1))
    fabric.barrier()
    return {
        "sum": fabric.all_reduce(one, reduce_op="sum").item(),
        "mean": fabric.all_reduce(one).item(),
        "max_dict": fabric.all_reduce({"a": torch.tensor([rank, -rank])}, reduce_op="max")["a"].tolist(),
        "gathered": fabric.all_gather(torch.tensor([rank, 7])).tolist(),
        "broadcast": fabric.broadcast({"from": rank}, src=1),
        "decision": fabric.strategy.reduce_boolean_decision(rank == 0, all=False),
    }


def accumulation(fabric: Fabric, model: torch.nn.Module) -> Dict[str, Any]:
    """Two micro-batches: the first inside no_backward_sync stays local, the
    second backward averages the sum of both."""
    x, y = dataset().tensors
    mine = slice(fabric.global_rank * BATCH, (fabric.global_rank + 1) * BATCH)
    loss = lambda: torch.nn.functional.cross_entropy(model(x[mine]), y[mine])  # noqa: E731
    model.zero_grad()
    with fabric.no_backward_sync(model):
        fabric.backward(loss())
    local_first = torch.cat([p.grad.flatten() for p in model.parameters()])
    fabric.backward(loss())
    synced = torch.cat([p.grad.flatten() for p in model.parameters()])
    expected = fabric.all_reduce(2 * local_first)  # both passes compute the same local gradient
    firsts = fabric.all_gather(local_first)
    return {
        "first_differs_across_ranks": bool((firsts[0] != firsts[1]).any()),
        "synced_error": float((synced - expected).abs().max()),
    }


def checkpoint(fabric: Fabric, trained: Dict[str, Any], path: Path) -> Dict[str, Any]:
    fabric.save(path, {"model": trained["model"], "optimizer": trained["optimizer"], "steps": trained["steps"]})
    torch.manual_seed(5)
    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "steps": 0}
    rest = fabric.load(path, state)
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    before = [trained["optimizer"].state[p]["momentum_buffer"] for p in trained["model"].parameters()]
    return {
        "loaded_params_equal": flat(model) == flat(trained["model"]),
        "loaded_momentum_equal": all(torch.equal(a, b) for a, b in zip(momentum, before)),
        "loaded_steps": state["steps"],
        "rest": sorted(rest),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fabric = Fabric(strategy="ring", accelerator="cpu", devices=2)
    fabric.launch()
    trained = readme_loop(fabric)
    result = {
        "world_size": fabric.world_size,
        "strategy": type(fabric.strategy).__name__,
        "base": [c.__module__ for c in type(fabric.strategy).__mro__ if c.__name__ == "ParallelStrategy"],
        "params": trained["params"],
        "steps": trained["steps"],
        "collectives": collectives(fabric),
        "accumulation": accumulation(fabric, trained["model"]),
        "checkpoint": checkpoint(fabric, trained, args.out / "checkpoint.ckpt"),
    }
    if fabric.global_rank == 0:
        result["plain_torch"] = plain_torch()
    (args.out / f"rank{fabric.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
