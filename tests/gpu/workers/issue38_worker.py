"""Issue 38's optimizers on CUDA tensors, one rank of a job on a real GPU.

    ringrun -np 2 python tests/gpu/workers/issue38_worker.py

- ``shard_optimizer_state=True``: Adam on a CUDA model, two accumulated
  passes a step, bitwise equal to the unsharded DistributedOptimizer every
  step; the state on each rank half of it; clipping before the reduction
  bitwise torch's on the unsharded gradients; the consolidated state_dict
  equal to the unsharded one.
- ``compression=hvd.PowerSGD(...)``: a CUDA regression; the ranks end
  bitwise identical, the loss falls, fewer bytes than the whole gradients.

Prints ``RESULT {json}`` and ``OK <rank>`` when every check passed; a failed
check raises.
"""

from __future__ import annotations

import json
from typing import Any, Dict

import torch

import ring_strategy.torch as hvd


def model(device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.Tanh(), torch.nn.Linear(96, 96), torch.nn.Tanh(),
                               torch.nn.Linear(96, 3)).to(device)


def loss_of(net: torch.nn.Module, step: int, part: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + 10 * hvd.rank() + part)
    x, y = torch.randn(16, 32, generator=g).to(device), torch.randn(16, 3, generator=g).to(device)
    return torch.nn.functional.mse_loss(net(x), y)


def equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def state_bytes(opt: torch.optim.Optimizer) -> int:
    return sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
               if torch.is_tensor(v) and k != "step")


def sharded(device: torch.device) -> Dict[str, Any]:
    nets = [model(device), model(device)]
    plain = hvd.DistributedOptimizer(torch.optim.Adam(nets[0].parameters(), lr=0.01), backward_passes_per_step=2)
    shard = hvd.DistributedOptimizer(torch.optim.Adam(nets[1].parameters(), lr=0.01), shard_optimizer_state=True)
    every_step = []
    for step in range(4):
        for i, (net, opt) in enumerate(zip(nets, (plain, shard))):
            opt.zero_grad()
            for part in (0, 1):
                loss_of(net, step, part, device).backward()
            if step == 3 and i == 0:  # the last step clipped, both ways
                opt.synchronize()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.01)
                with opt.skip_synchronize():
                    opt.step()
                continue
            if step == 3:
                opt.clip_grad_norm_(0.01)
            opt.step()
        every_step.append(equal(*nets))
    full, whole = shard.state_dict(), plain.state_dict()
    same_state = all(torch.equal(full["state"][i]["exp_avg_sq"], whole["state"][i]["exp_avg_sq"]) for i in whole["state"])
    return {"bitwise_every_step": every_step, "state_bytes": [state_bytes(plain), state_bytes(shard)],
            "state_dict_equal": same_state, "on_gpu": next(iter(shard.state.values()))["exp_avg"].is_cuda}


def powersgd(device: torch.device) -> Dict[str, Any]:
    net = model(device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters(),
                                   compression=hvd.PowerSGD(rank=2, warmup_steps=2, min_size=100))
    losses = []
    for step in range(25):
        opt.zero_grad()
        loss = loss_of(net, 0, 0, device)  # one batch per rank: the loss must fall
        loss.backward()
        opt.step()
        losses.append(float(hvd.allreduce(loss.detach(), name="loss")))
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    both = hvd.allgather(flat.unsqueeze(0), name="params")
    reducer = opt._sync._reducer
    return {"identical": all(torch.equal(both[0], row) for row in both), "first_loss": losses[0],
            "last_loss": losses[-1], "sent_bytes": reducer.sent_bytes, "dense_bytes": reducer.dense_bytes}


def main() -> None:
    hvd.init()
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    report = {"rank": hvd.rank(), "sharded": sharded(device), "powersgd": powersgd(device)}
    print("RESULT " + json.dumps(report), flush=True)
    s, p = report["sharded"], report["powersgd"]
    assert s["bitwise_every_step"] == [True] * 4 and s["state_dict_equal"] and s["on_gpu"], s
    assert abs(s["state_bytes"][1] * hvd.size() - s["state_bytes"][0]) <= 64 * hvd.size(), s
    assert p["identical"] and p["last_loss"] < 0.5 * p["first_loss"] and p["sent_bytes"] < p["dense_bytes"] / 4, p
    print(f"OK {hvd.rank()}", flush=True)


if __name__ == "__main__":
    main()
