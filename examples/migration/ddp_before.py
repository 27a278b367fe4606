"""PyTorch DDP training, as a DDP user writes it: torchrun --nproc_per_node 2 ddp_before.py.
(docs/migrate-ddp.md: the same training on ring is ddp_after.py.)"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
X = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
y = X @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
mine = slice(rank, None, size)  # this worker's shard of the data

model = DDP(torch.nn.Linear(4, 1))  # rank 0's weights to every worker; gradients averaged in backward
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for step in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(X[mine]), y[mine])
    loss.backward()
    optimizer.step()

if rank == 0:
    weights = model.module.weight
    print("weights", " ".join(f"{w:.5f}" for w in weights.flatten().tolist()), f"{model.module.bias.item():.5f}")
dist.destroy_process_group()
