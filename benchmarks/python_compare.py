#!/usr/bin/env python3
"""python_compare: hvactor.torch (Python) against the LibTorch adapter (C++)
and PyTorch DDP (gloo), every side an SPMD program under hvactor-run, in
interleaved rounds (issue 57's targets):

  - the MLP training step of torch_spmd / python_spmd.py (1024-1024-1024-10,
    batch 32 per rank, SGD): Python / C++ and Python / DDP, median ms;
  - a synchronous 4 B allreduce (Sum, in place): Python - C++, us per call.

    benchmarks/python_compare.py [--np 2] [--rounds 5] [--steps 30] [--calls 20000]

Needs the build tree's hvactor-run, benchmarks/torch_spmd and the Python
package (build/python); the interpreter is the one the package was built for.
"""

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cmake_python(build):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        m = re.search(r"^Python3_EXECUTABLE:[A-Z]*=(.*)$", f.read(), re.M)
    return m.group(1) if m else sys.executable


def run_one(args, build, np_, kind, n):
    run = os.path.join(build, "tools", "hvactor-run")
    py = cmake_python(build)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    with tempfile.TemporaryDirectory() as tmp:
        program = {
            "cpp-step": [os.path.join(build, "benchmarks", "torch_spmd"), "step", str(n)],
            "cpp-call": [os.path.join(build, "benchmarks", "torch_spmd"), "call", str(n)],
            "py-step": [py, os.path.join(HERE, "python_spmd.py"), "step", str(n)],
            "py-call": [py, os.path.join(HERE, "python_spmd.py"), "call", str(n)],
            "ddp-step": [py, os.path.join(HERE, "python_spmd.py"), "ddp", str(n),
                         os.path.join(tmp, "rendezvous")],
        }[kind]
        p = subprocess.run([run, "-np", str(np_)] + program, capture_output=True, text=True,
                           env=env, timeout=args.timeout)
    m = re.search(r"RESULT \w+ ([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"{kind} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return float(m.group(1))


def spread(values):
    med = statistics.median(values)
    return med, (max(values) - min(values)) / med * 100 if med else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    kinds = {"cpp-step": args.steps, "py-step": args.steps, "ddp-step": args.steps,
             "cpp-call": args.calls, "py-call": args.calls}
    results = {k: [] for k in kinds}
    rng = random.Random(57)
    for r in range(args.rounds):
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            results[kind].append(run_one(args, args.build, args.np, kind, kinds[kind]))
            print(f"# round {r + 1}/{args.rounds} {kind}: {results[kind][-1]:.3f}", flush=True)
    cpp, py, ddp = (spread(results[k]) for k in ("cpp-step", "py-step", "ddp-step"))
    ccall, pcall = spread(results["cpp-call"]), spread(results["py-call"])
    ratios = [p / c for p, c in zip(results["py-step"], results["cpp-step"])]
    ddp_ratios = [p / d for p, d in zip(results["py-step"], results["ddp-step"])]
    over = [p - c for p, c in zip(results["py-call"], results["cpp-call"])]
    print(f"\n{args.np} ranks, {args.rounds} interleaved rounds, {os.cpu_count()} cores; medians "
          "(range as % of the median)\n")
    print("| what | hvactor.torch (Python) | LibTorch adapter (C++) | DDP (gloo) | Python / C++ "
          "| Python / DDP |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| MLP step, ms | {py[0]:.2f} ({py[1]:.0f}%) | {cpp[0]:.2f} ({cpp[1]:.0f}%) | "
          f"{ddp[0]:.2f} ({ddp[1]:.0f}%) | {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f}) | {statistics.median(ddp_ratios):.3f} "
          f"({min(ddp_ratios):.3f}-{max(ddp_ratios):.3f}) |")
    print(f"| 4 B allreduce_, us | {pcall[0]:.2f} ({pcall[1]:.0f}%) | {ccall[0]:.2f} "
          f"({ccall[1]:.0f}%) | | +{statistics.median(over):.2f} us "
          f"({min(over):.2f}-{max(over):.2f}) | |")


if __name__ == "__main__":
    main()
