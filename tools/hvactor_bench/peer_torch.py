#!/usr/bin/python3
"""The torch.distributed peer of hvactor-bench (Debian's python3-torch).

hvactor-bench starts one process per rank and size, interleaved with its own
measurement of that size:

  python3 peer_torch.py --kind allreduce|allgather|broadcast --bytes B
      --iters I --warmup W [--check] --rank R --size N --store FILE

torch.distributed's gloo backend (all_reduce SUM, all_gather into one tensor,
broadcast from rank 0), float32, rendezvous through a FileStore, measured
as tools/common/bench_method.hpp says (rank 0 prints the "point" line of
tools/hvactor_bench/peer_protocol.hpp).
"""
import argparse
import datetime
import sys
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(prog="hvactor-bench peer (torch)")
    p.add_argument("--kind", choices=["allreduce", "allgather", "broadcast"], required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--check", action="store_true")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--store", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=a.rank,
                            world_size=a.size, timeout=datetime.timedelta(seconds=60))
    count = a.bytes // 4
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

    for _ in range(a.warmup):
        run()
    dist.barrier()
    run()
    samples = []
    start = time.perf_counter()
    for _ in range(a.iters):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e6)
    loop = torch.tensor([(time.perf_counter() - start) * 1e6], dtype=torch.float64)
    dist.all_reduce(loop, op=dist.ReduceOp.MAX)
    if a.rank == 0:
        print("point %d %.3f %d %s" % (a.bytes, loop.item() / a.iters, int(wrong.item()),
                                       " ".join("%.3f" % s for s in samples)), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
