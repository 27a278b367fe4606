"""The DDP training of ddp_before.py on ring: ringrun -np 2 python ddp_after.py.
(docs/migrate-ddp.md: torchrun --nproc_per_node 2 ddp_after.py works too.)"""

import torch

import ring_strategy.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
torch.manual_seed(0)
X = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
y = X @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
mine = slice(rank, None, size)  # this worker's shard of the data

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())  # gradients averaged
hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # rank 0's weights to every worker

for step in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(X[mine]), y[mine])
    loss.backward()
    optimizer.step()

if rank == 0:
    weights = model.weight
    print("weights", " ".join(f"{w:.5f}" for w in weights.flatten().tolist()), f"{model.bias.item():.5f}")
