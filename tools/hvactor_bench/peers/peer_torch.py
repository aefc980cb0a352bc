#!/usr/bin/python3
"""The torch.distributed peer of hvactor-bench (Debian's python3-torch).

hvactor-bench starts one process per rank and round, which measures every
size of the sweep, between hvactor's own rounds:

  python3 peer_torch.py --kind allreduce|allgather|broadcast --sizes B1,B2,..
      --iters I1,I2,.. --warmup W1,W2,.. [--check] --rank R --size N
      --store FILE

(a single --iters or --warmup value applies to every size; rank 0 prints at
most 1000 samples per size, evenly spread).

torch.distributed's gloo backend (all_reduce SUM, all_gather into one tensor,
broadcast from rank 0), float32, rendezvous through a FileStore, measured
as tools/common/bench_method.hpp says (rank 0 prints the "point" line of
tools/hvactor_bench/peers/peer_protocol.hpp).
"""
import argparse
import datetime
import sys
import time

import torch
import torch.distributed as dist


MAX_SAMPLES = 1000


def number_list(text):
    values = [int(v) for v in text.split(",")]
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("negative: " + text)
    return values


def measure(a, nbytes, iters, warmup):
    count = nbytes // 4
    if a.kind == "allgather":
        count //= a.size
    x = torch.ones(count, dtype=torch.float32)
    out = torch.empty(count * a.size, dtype=torch.float32) if a.kind == "allgather" else None
    # Torch 1.13's gloo backend has no all_gather_into_tensor: all_gather
    # into views of one output tensor is the same data movement.
    parts = list(out.chunk(a.size)) if out is not None else None

    def run():
        if a.kind == "allreduce":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        elif a.kind == "broadcast":
            dist.broadcast(x, 0)
        else:
            dist.all_gather(parts, x)

    def value(rank, n):
        return (torch.arange(n, dtype=torch.int64) % 7 + 1).to(torch.float32) * (rank + 1)

    wrong = torch.zeros(1, dtype=torch.float64)
    if a.check:
        x.copy_(value(a.rank, count))
        run()
        if a.kind == "allreduce":
            want = value(0, count) * (a.size * (a.size + 1) // 2)
            wrong[0] = int((x != want).sum())
        elif a.kind == "broadcast":
            wrong[0] = int((x != value(0, count)).sum())
        else:
            want = torch.cat([value(r, count) for r in range(a.size)])
            wrong[0] = int((out != want).sum())
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)

    for _ in range(warmup):
        run()
    dist.barrier()
    run()
    samples = []
    start = time.perf_counter()
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e6)
    loop = torch.tensor([(time.perf_counter() - start) * 1e6], dtype=torch.float64)
    dist.all_reduce(loop, op=dist.ReduceOp.MAX)
    if a.rank == 0:
        if len(samples) > MAX_SAMPLES:
            samples = [samples[i * len(samples) // MAX_SAMPLES] for i in range(MAX_SAMPLES)]
        print("point %d %.3f %d %s" % (nbytes, loop.item() / iters, int(wrong.item()),
                                       " ".join("%.3f" % s for s in samples)), flush=True)


def main():
    p = argparse.ArgumentParser(prog="hvactor-bench peer (torch)")
    p.add_argument("--kind", choices=["allreduce", "allgather", "broadcast"], required=True)
    p.add_argument("--sizes", type=number_list, required=True)
    p.add_argument("--iters", type=number_list, required=True)
    p.add_argument("--warmup", type=number_list, required=True)
    p.add_argument("--check", action="store_true")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--store", required=True)
    a = p.parse_args()
    n = len(a.sizes)
    for name in ("iters", "warmup"):
        v = getattr(a, name)
        if len(v) not in (1, n):
            p.error("--%s takes one value or one per size" % name)
        setattr(a, name, v * n if len(v) == 1 else v)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=a.rank,
                            world_size=a.size, timeout=datetime.timedelta(seconds=60))
    for nbytes, iters, warmup in zip(a.sizes, a.iters, a.warmup):
        measure(a, nbytes, iters, warmup)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
