"""Uneven data with DistributedOptimizer: rank 1 runs out of batches first
and joins; the others keep training, rank 1 adding zero gradients."""

import torch

import ring_strategy.torch as hvd

hvd.init()
n, me = hvd.size(), hvd.rank()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
batches = 1 if me == 1 else 3
for step in range(batches):
    opt.zero_grad()
    model(torch.ones(2, 4) * (me + 1)).sum().backward()
    opt.step()
last = hvd.join()
assert last != 1, last
# Ranks with data applied identical updates (the joined rank's zeros
# included); as with Horovod, the joined rank catches up by broadcast.
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
busy = hvd.allgather(flat.unsqueeze(0))[[r for r in range(n) if r != 1]]
assert torch.equal(busy, busy[:1].expand_as(busy)), busy
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = hvd.allgather(flat.unsqueeze(0))
assert torch.equal(every, flat.expand_as(every)), every
print(f"{me}: ok")
hvd.shutdown()
