"""An elastic training program for test_elastic.py: one SGD step per epoch
on the same data on every rank, a commit per epoch; the last rank of the
first world SIGKILLs itself in epoch KILL_EPOCH after its step and before
the commit (once: MARKER records it)."""

import os
import signal
import sys

import torch

import hvactor.torch as hvd

EPOCHS = int(sys.argv[1])
KILL_EPOCH = int(sys.argv[2])
MARKER = sys.argv[3]

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, epoch=0)
state.register_reset_callbacks([lambda: print(f"RESET size={hvd.size()}", flush=True)])
x = torch.arange(32.0).reshape(8, 4) / 32
y = torch.ones(8, 1)


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if state.epoch == KILL_EPOCH and hvd.rank() == hvd.size() - 1 and \
                not os.path.exists(MARKER):
            open(MARKER, "w").close()
            print(f"KILLING rank={hvd.rank()} epoch={state.epoch}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        state.epoch += 1
        state.commit()
        if hvd.rank() == 0:
            print(f"COMMIT epoch={state.epoch} size={hvd.size()}", flush=True)
    return state.epoch


done = train(state)
w = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
print(f"FINISHED rank={hvd.rank()} size={hvd.size()} epochs={done} weights={w}", flush=True)
