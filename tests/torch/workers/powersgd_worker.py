"""DistributedOptimizer(compression=hvd.PowerSGD(...)) on every rank.

    ringrun -np 2 python powersgd_worker.py

A small regression (a teacher network, rank-dependent data) trains with
SGD and momentum uncompressed and with PowerSGD; then fixed gradients check
the error feedback's bookkeeping. Prints one JSON line per rank: what
tests/torch/test_powersgd.py checks.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import torch

import ring_strategy.torch as hvd

STEPS, WARMUP = 30, 3


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.Tanh(), torch.nn.Linear(48, 48), torch.nn.Tanh(),
                               torch.nn.Linear(48, 4))


def batch() -> Tuple[torch.Tensor, torch.Tensor]:
    teacher = torch.Generator().manual_seed(7)
    w1, w2 = torch.randn(16, 8, generator=teacher), torch.randn(8, 4, generator=teacher)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(100 + hvd.rank()))
    return x, torch.tanh(x @ w1) @ w2


def train(compression: Any, steps: int) -> Tuple[torch.nn.Module, List[float], Any]:
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=net.named_parameters(), compression=compression)
    x, y = batch()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(hvd.allreduce(loss.detach(), name="loss")))  # the global batch's loss
    return net, losses, opt._sync._reducer


def flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def same_on_every_rank(t: torch.Tensor) -> bool:
    return bool(torch.equal(hvd.allreduce(t, op=hvd.Max, name="max"), t)
                and torch.equal(hvd.allreduce(t, op=hvd.Min, name="min"), t))


def error_feedback() -> Tuple[float, float]:
    """With SGD(lr=1) on fixed rank-dependent gradients g_t, the updates sum to
    sum_t mean(g_t) - mean(e_T): what compression left out is carried, not lost.
    Returns the largest difference from that, relative to the sum's size, and
    the error's own size relative to it (rank 1 of a 24 x 20 matrix leaves much out)."""
    p = torch.nn.Parameter(torch.zeros(24, 20))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), named_parameters=[("w", p)],
                                   compression=hvd.PowerSGD(rank=1, warmup_steps=0, min_size=0))
    total = torch.zeros_like(p)
    g = torch.Generator().manual_seed(5 + hvd.rank())
    for _ in range(6):
        opt.zero_grad()
        p.grad = torch.randn(24, 20, generator=g)
        total += hvd.allreduce(p.grad.clone(), name="true_grad")
        opt.step()
    error = hvd.allreduce(opt._sync._reducer._errors["w"], name="error")
    expected = total - error
    scale = expected.abs().max()
    return float(((-p.detach()) - expected).abs().max() / scale), float(error.abs().max() / scale)


def main() -> None:
    hvd.init()
    torch.set_num_threads(1)
    plain_net, plain_losses, _ = train(hvd.Compression.none, STEPS)
    config = hvd.PowerSGD(rank=1, warmup_steps=WARMUP, min_size=100)
    low_net, low_losses, reducer = train(config, STEPS)
    warm_plain, _, _ = train(hvd.Compression.none, WARMUP)
    warm_low, _, _ = train(config, WARMUP)
    layers = dict(model().named_parameters())
    report: Dict[str, Any] = {
        "rank": hvd.rank(),
        "plain_losses": plain_losses,
        "powersgd_losses": low_losses,
        "identical": same_on_every_rank(flat(low_net)),
        "warmup_bitwise": torch.equal(flat(warm_plain), flat(warm_low)),
        "differs_after_warmup": not torch.equal(flat(plain_net), flat(low_net)),
        "sent_bytes": reducer.sent_bytes,
        "dense_bytes": reducer.dense_bytes,
        "steps": reducer.steps,
        "compressed": {n: reducer.compresses(p) for n, p in layers.items()},
        "error_feedback": error_feedback(),
    }
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
