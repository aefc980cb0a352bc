"""python_spmd: the Python side of benchmarks/python_compare.py, an SPMD
program under hvactor-run (what a horovod.torch user runs):

    python_spmd.py step STEPS        the MLP step of torch_spmd through
                                     hvactor.torch's DistributedOptimizer
    python_spmd.py ddp STEPS FILE    the same step through PyTorch's
                                     DistributedDataParallel (gloo; FILE:
                                     torch.distributed's rendezvous file)
    python_spmd.py call CALLS        a synchronous 4 B hvd.allreduce_ (Sum)

Prints rank 0's median step ms or mean us per call as torch_spmd does.
"""

import os
import statistics
import sys
import time

import torch


def mlp():
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 10))


def timed_steps(model, opt, rank, steps, barrier):
    torch.manual_seed(1000 + rank)
    x = torch.randn(32, 1024)
    y = torch.randint(0, 10, (32,))
    ms = []
    for i in range(steps + 5):
        if i == 5:
            barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 5:
            ms.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ms)


def hvactor_step(steps):
    import hvactor.torch as hvd
    hvd.init()
    model = mlp()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    return hvd.rank(), timed_steps(model, opt, hvd.rank(), steps, hvd.barrier)


def ddp_step(steps, rendezvous):
    import torch.distributed as dist
    rank, size = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=size)
    model = torch.nn.parallel.DistributedDataParallel(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    result = timed_steps(model, opt, rank, steps, dist.barrier)
    dist.destroy_process_group()
    return rank, result


def hvactor_call(calls):
    import hvactor.torch as hvd
    hvd.init()
    t = torch.ones(1)
    for _ in range(100):
        hvd.allreduce_(t, op=hvd.Sum)
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        hvd.allreduce_(t, op=hvd.Sum)
    return hvd.rank(), (time.perf_counter() - t0) * 1e6 / calls


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    if mode == "step":
        rank, value = hvactor_step(n)
    elif mode == "ddp":
        rank, value = ddp_step(n, sys.argv[3])
    elif mode == "call":
        rank, value = hvactor_call(n)
    else:
        sys.exit(f"unknown mode {mode!r} (step, ddp, call)")
    if rank == 0:
        print(f"RESULT {mode} {value:.4f}", flush=True)


if __name__ == "__main__":
    main()
