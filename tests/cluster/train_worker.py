"""A worker for the launcher tests: ``torchrun``/``mpirun`` start it directly.

``python train_worker.py EXPECTED_ENVIRONMENT_CLASS``. It checks that ring
found its place in the job from the launcher's variables, trains a small model
with DistributedOptimizer on its shard of each global batch, and compares the
result with a single-process run on the whole global batch and with every
other rank's replica. In between it leaves the job and joins it again, so rank
0 serves the rendezvous store a second time. It prints
``<rank>: <environment class> ok job <job id>`` when every check passed.
"""

import sys
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import ring_strategy.torch as hvd
from ring_strategy.basics import _env
from tests.workers.checks import identical_rows

STEPS, ROWS, IN, OUT = 5, 4, 6, 3


def train(shard: Optional[slice], size: int) -> torch.Tensor:
    """Trains on ``shard`` of each global batch of ``size * ROWS`` rows with
    DistributedOptimizer, or on the whole batch in this process when ``shard``
    is None; returns the parameters, flattened."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, 8), nn.Tanh(), nn.Linear(8, OUT))
    g = torch.Generator().manual_seed(1234)
    xs, ys = torch.randn(STEPS, size * ROWS, IN, generator=g), torch.randn(STEPS, size * ROWS, OUT, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if shard is not None:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    rows = shard or slice(None)
    for s in range(STEPS):
        opt.zero_grad()
        F.mse_loss(model(xs[s, rows]), ys[s, rows]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main() -> None:
    expected = sys.argv[1]
    hvd.init()
    env, rank, size = _env(), hvd.rank(), hvd.size()
    assert type(env).__name__ == expected, f"detected {env!r}, expected {expected}"
    assert size == 2 and hvd.local_size() == 2 and hvd.cross_size() == 1, repr(env)
    distributed = train(slice(rank * ROWS, (rank + 1) * ROWS), size)
    hvd.shutdown()
    diff = (distributed - train(None, size)).abs().max().item()
    assert diff < 1e-5, f"rank {rank}: differs from the single-process run by {diff:g}"
    hvd.init()  # a second rendezvous in the same processes
    identical_rows(hvd.allgather(distributed.unsqueeze(0)))
    hvd.shutdown()
    # One write per line: the launcher merges both ranks' output.
    sys.stdout.write(f"{rank}: {type(env).__name__} ok job {env.job_id}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
