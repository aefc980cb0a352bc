"""The hvactor.torch quickstart: a program written for horovod.torch, with
one changed import. Run it on 2 ranks:

    hvactor-run -np 2 python3 examples/python/quickstart.py

(PYTHONPATH=build/python from a build tree; an installed hvactor is on
Python's path already.)
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hvactor.torch as hvd  # was: import horovod.torch as hvd

# --8<-- [start:quickstart]
hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)

# A regression dataset; each rank trains on its shard.
x = torch.randn(1024, 8)
y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.1 * torch.randn(1024, 1)
dataset = TensorDataset(x, y)
sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(dataset, batch_size=32, sampler=sampler)

model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
# Horovod's rule: scale the learning rate by the number of ranks.
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

for epoch in range(3):
    sampler.set_epoch(epoch)
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
    # The epoch's last loss, averaged over the ranks.
    avg = hvd.allreduce(loss.detach(), name="avg_loss")
    if hvd.rank() == 0:
        print(f"epoch {epoch}: loss {avg.item():.4f} on {hvd.size()} ranks", flush=True)
# --8<-- [end:quickstart]
