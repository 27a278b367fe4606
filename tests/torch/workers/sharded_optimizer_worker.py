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


def clipping_bitwise() -> bool:
    """Clipping before synchronize(): bitwise torch's clip_grad_norm_ on the unsharded optimizer's gradients."""
    nets = [model(), model()]
    plain = hvd.DistributedOptimizer(torch.optim.Adam(nets[0].parameters(), lr=0.1), backward_passes_per_step=2)
    sharded = hvd.DistributedOptimizer(torch.optim.Adam(nets[1].parameters(), lr=0.1), shard_optimizer_state=True)
    norms = []
    for step in range(2):
        passes(nets[0], step)
        plain.synchronize()
        norms.append(torch.nn.utils.clip_grad_norm_(nets[0].parameters(), 0.01))
        with plain.skip_synchronize():
            plain.step()
        plain.zero_grad()
        passes(nets[1], step)
        norms.append(sharded.clip_grad_norm_(0.01))
        sharded.step()
        sharded.zero_grad()
    return equal_params(*nets) and torch.equal(norms[0], norms[1]) and torch.equal(norms[2], norms[3])


def process_set_and_reshard(half: Any) -> Dict[str, bool]:
    """On a process set (this rank's half of the world) the sharded optimizer
    equals the unsharded one on that set; a state sharded over the whole
    world re-shards onto the half (another size) and goes on bitwise."""
    make = lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=1e-3)  # noqa: E731
    plain_net, sharded_net, world_net = model(), model(), model()
    plain = hvd.DistributedOptimizer(make(plain_net.parameters()), backward_passes_per_step=2, process_set=half)
    sharded = hvd.DistributedOptimizer(make(sharded_net.parameters()), shard_optimizer_state=True, process_set=half)
    world = hvd.DistributedOptimizer(make(world_net.parameters()), shard_optimizer_state=True)
    same = True
    for step in range(2):
        for net, opt in ((plain_net, plain), (sharded_net, sharded), (world_net, world)):
            opt.zero_grad()
            passes(net, step)
            opt.step()
        same = same and equal_params(plain_net, sharded_net)
    full = world.state_dict()
    world.reshard(full, process_set=half)
    plain_net.load_state_dict(world_net.state_dict())
    plain.load_state_dict(full)
    resharded = True
    for step in range(2, 4):
        for net, opt in ((plain_net, plain), (world_net, world)):
            opt.zero_grad()
            passes(net, step)
            opt.step()
        resharded = resharded and equal_params(plain_net, world_net)
    return {"process_set_bitwise": same, "resharded_bitwise": resharded,
            "resharded_size": world._ring_size == (half.size() if half.size() > 1 else 1)}


def elastic_commit_restore() -> bool:
    """TorchState commits a sharded optimizer's full state and restores it: a
    step taken after the commit is undone, and taking it again gives the same."""
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.01), shard_optimizer_state=True)
    state = hvd.elastic.TorchState(net, opt, epoch=0)
    state.sync()
    for step in range(2):
        opt.zero_grad()
        passes(net, step)
        opt.step()
    state.commit()
    committed = (copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict()))

    def again() -> Any:
        opt.zero_grad()
        passes(net, 2)
        opt.step()
        return copy.deepcopy(net.state_dict()), copy.deepcopy(opt.state_dict())

    first = again()
    state.restore()
    back = equal_states(opt.state_dict(), committed[1]) and all(
        torch.equal(net.state_dict()[k], v) for k, v in committed[0].items())
    second = again()
    return back and equal_states(first[1], second[1]) and all(torch.equal(first[0][k], v) for k, v in second[0].items())


def hvd_size() -> int:
    """The job's size, before init (from ringrun's environment)."""
    import os

    return int(os.environ["RING_SIZE"])


def main() -> None:
    size = hvd_size()
    halves = [hvd.ProcessSet([r, r + 1] if size > 2 else [r]) for r in range(0, size, 2 if size > 2 else 1)]
    hvd.init(process_sets=halves)
    half = next(ps for ps in halves if ps.included())
    torch.set_num_threads(1)
    report = {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "sgd": compare(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
        "adam": compare(lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=1e-3)),
        "clip_difference": clipping(),
        "clip_bitwise": clipping_bitwise(),
        "elastic_commit_restore": elastic_commit_restore(),
        **process_set_and_reshard(half),
        "is_adam": isinstance(hvd.DistributedOptimizer(torch.optim.Adam(model().parameters()),
                                                       shard_optimizer_state=True), torch.optim.Adam),
    }
    hvd.barrier()  # the halves finish at different times: no rank leaves while the other half works
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
