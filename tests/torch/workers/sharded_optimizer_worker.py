"""DistributedOptimizer(shard_optimizer_state=True) against the unsharded one, on every rank.

    ringrun -np N python sharded_optimizer_worker.py

For SGD (momentum, Nesterov, weight decay) and Adam (weight decay), two
copies of one model train side by side on the same rank-dependent batches,
one with the unsharded DistributedOptimizer and one sharded, and every step
(two backward passes each: accumulation) must leave bitwise equal
parameters. Then the consolidated state_dict() must equal the unsharded
one's; the full and the local form load into fresh sharded optimizers that
go on bitwise equal; and clipping by the global norm matches within rounding.
Prints one JSON line per rank: what the test checks, with the state bytes.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Dict

import torch

import ring_strategy.torch as hvd

STEPS = 4


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 3), torch.nn.Linear(3, 1))
    net.unused = torch.nn.Parameter(torch.randn(5))  # no gradient anywhere: averaged as zeros
    net.scalar = torch.nn.Parameter(torch.tensor(0.5))  # fewer elements than ranks: empty blocks
    return net


def loss_of(net: torch.nn.Module, step: int, half: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + 10 * hvd.rank() + half)
    x, y = torch.randn(6, 7, generator=g), torch.randn(6, 1, generator=g)
    return torch.nn.functional.mse_loss(net(x) * net.scalar, y)


def passes(net: torch.nn.Module, step: int) -> None:
    for half in (0, 1):
        loss_of(net, step, half).backward()


def state_bytes(state: Dict) -> int:
    """Bytes of the per-element state tensors (not the step counters)."""
    return sum(v.numel() * v.element_size() for s in state.values() for k, v in s.items()
               if torch.is_tensor(v) and k != "step")


def equal_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def equal_states(a: Dict, b: Dict) -> bool:
    if a["param_groups"] != b["param_groups"] or sorted(a["state"]) != sorted(b["state"]):
        return False
    return all(sorted(a["state"][i]) == sorted(b["state"][i]) and all(
        torch.equal(a["state"][i][k], b["state"][i][k]) for k in a["state"][i]) for i in a["state"])


def compare(make: Callable[[Any], torch.optim.Optimizer]) -> Dict[str, Any]:
    plain_net, sharded_net = model(), model()
    plain = hvd.DistributedOptimizer(make(plain_net.parameters()), backward_passes_per_step=2)
    sharded = hvd.DistributedOptimizer(make(sharded_net.parameters()), shard_optimizer_state=True)
    same = []
    for step in range(STEPS):
        for net, opt in ((plain_net, plain), (sharded_net, sharded)):
            opt.zero_grad()
            passes(net, step)
            opt.step()
        same.append(equal_params(plain_net, sharded_net))
    full = sharded.state_dict()
    result = {
        "bitwise_every_step": same,
        "state_dict_equal": equal_states(full, plain.state_dict()),
        "state_bytes": [state_bytes(plain.state), state_bytes(sharded.state)],
        "sharded_grads_released": all(p.grad is None for p in sharded_net.parameters()),
    }
    local = sharded.local_state_dict()
    for form, state in (("full", full), ("local", local)):
        net = copy.deepcopy(sharded_net)
        resumed = hvd.DistributedOptimizer(make(net.parameters()), shard_optimizer_state=True)
        resumed.load_state_dict(copy.deepcopy(state))
        ok = True
        for step in range(STEPS, STEPS + 2):
            for n, opt in ((plain_net, plain), (net, resumed)):
                opt.zero_grad()
                passes(n, step)
                opt.step()
            ok = ok and equal_params(plain_net, net)
        result[f"resumed_{form}_bitwise"] = ok
        plain_net.load_state_dict(sharded_net.state_dict())  # back to where both were for the next form
        plain.load_state_dict(full)
    return result


def clipping() -> float:
    """Largest difference after one clipped step, sharded against unsharded."""
    nets = [model(), model()]
    plain = hvd.DistributedOptimizer(torch.optim.SGD(nets[0].parameters(), lr=0.5), backward_passes_per_step=2)
    sharded = hvd.DistributedOptimizer(torch.optim.SGD(nets[1].parameters(), lr=0.5), shard_optimizer_state=True)
    passes(nets[0], 0)
    plain.synchronize()
    torch.nn.utils.clip_grad_norm_(nets[0].parameters(), 0.01)
    with plain.skip_synchronize():
        plain.step()
    passes(nets[1], 0)
    sharded.synchronize()
    sharded.clip_grad_norm_(0.01)
    sharded.step()
    return max(float((p - q).abs().max()) for p, q in zip(*(n.parameters() for n in nets)))


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    report = {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "sgd": compare(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
        "adam": compare(lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=1e-3)),
        "clip_difference": clipping(),
        "is_adam": isinstance(hvd.DistributedOptimizer(torch.optim.Adam(model().parameters()),
                                                       shard_optimizer_state=True), torch.optim.Adam),
    }
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
