"""Horovod PyTorch training on ring: ringrun -np 2 python horovod_torch_after.py.
(docs/migrate-horovod.md: the Horovod script it came from is horovod_torch_before.py.)"""

import torch

import ring_strategy.torch as hvd

hvd.init()
torch.manual_seed(0)
X = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
y = X @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
mine = slice(hvd.rank(), None, hvd.size())  # this worker's shard of the data

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

for step in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(X[mine]), y[mine])
    loss.backward()
    optimizer.step()

if hvd.rank() == 0:
    print("weights", " ".join(f"{w:.5f}" for w in model.weight.flatten().tolist()), f"{model.bias.item():.5f}")
