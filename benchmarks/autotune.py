#!/usr/bin/env python3
"""Autotune against a hand-picked grid on `hvactor-bench train` (issue 31).

Every configuration trains the same MLP on the same number of workers for
the same warm-up and measured batches; the grid sets HOROVOD_FUSION_THRESHOLD
and HOROVOD_CYCLE_TIME by hand, the autotune run starts mistuned (no fusion,
20 ms cycles, tuned from there: HVACTOR_AUTOTUNE_SET_KNOBS=start) with
HOROVOD_AUTOTUNE=1 and tunes during the warm-up batches
(its log says when it settled). Rounds interleave the configurations, so
that a slow minute of the machine hits all of them; each gets the median of
its rounds and the spread (min-max).

usage: benchmarks/autotune.py BUILD_DIR [--model resnet50 --image-size 32 --batch-size 2]
       [--grid corners|full] [--rounds 3] [--warmup 130] [--out results.txt]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

GRID = {"full": ([0, 4, 64], [1, 5, 20]), "corners": ([0, 64], [1, 20])}
TOTAL = re.compile(r"Total (?:samples|img)/sec on (\d+) worker\(s\): ([0-9.]+)")


def run(bench, common, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    out = subprocess.run([bench] + common, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"hvactor-bench failed ({env_extra}):\n{out.stdout}\n{out.stderr}")
    m = TOTAL.search(out.stdout)
    if not m:
        sys.exit(f"no total in hvactor-bench's output:\n{out.stdout}")
    return float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=200,
                    help="warm-up batches of the autotune run (tuning happens there)")
    ap.add_argument("--grid-warmup", type=int,
                    help="warm-up batches of the grid runs (default: --warmup)")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--grid", choices=sorted(GRID), default="full")
    ap.add_argument("--steps-per-sample", type=int, default=4)
    ap.add_argument("--max-samples", type=int, default=8)
    ap.add_argument("--out")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tools", "hvactor-bench")
    base = ["train", "--model", a.model, "--image-size", str(a.image_size), "--batch-size",
            str(a.batch_size), "-np", str(a.np), "--threads", "1",
            "--num-batches-per-iter", "10", "--num-iters", "10"]
    grid_warmup = a.warmup if a.grid_warmup is None else a.grid_warmup
    common = base + ["--num-warmup-batches", str(grid_warmup)]
    tuned_common = base + ["--num-warmup-batches", str(a.warmup)]
    configs = {}
    for mib in GRID[a.grid][0]:
        for ms in GRID[a.grid][1]:
            configs[f"grid {mib} MiB, {ms} ms"] = {
                "HOROVOD_FUSION_THRESHOLD": str(mib << 20), "HOROVOD_CYCLE_TIME": str(ms)}
    logs = []
    results = {name: [] for name in list(configs) + ["autotune from 0 MiB, 20 ms"]}
    for r in range(a.rounds):
        for name, env in configs.items():
            results[name].append(run(bench, common, env))
            print(f"round {r} {name}: {results[name][-1]:.1f}", flush=True)
        log = tempfile.NamedTemporaryFile(prefix="hvactor-autotune-", suffix=".csv", delete=False)
        log.close()
        # Set knobs stay fixed under autotune (Horovod's); "start" tunes
        # them from the mistuned values instead.
        tuned = {"HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_CYCLE_TIME": "20",
                 "HVACTOR_AUTOTUNE_SET_KNOBS": "start",
                 "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log.name,
                 "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
                 "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": str(a.steps_per_sample),
                 "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(a.max_samples)}
        name = "autotune from 0 MiB, 20 ms"
        results[name].append(run(bench, tuned_common, tuned))
        with open(log.name) as f:
            lines = f.read().splitlines()
        os.unlink(log.name)
        logs.append(lines)
        print(f"round {r} {name}: {results[name][-1]:.1f} (chose {lines[-1] if lines else '?'})",
              flush=True)
    med = {n: statistics.median(v) for n, v in results.items()}
    best = max((n for n in med if n.startswith("grid")), key=lambda n: med[n])
    rows = [f"hvactor-bench {' '.join(base)}; warm-up batches: grid {grid_warmup}, autotune "
            f"{a.warmup}; {a.rounds} rounds, interleaved; "
            "total samples (images)/sec, median (min-max); autotune: warm-up samples 1, steps per sample "
            f"{a.steps_per_sample}, Bayesian samples {a.max_samples}", "",
            "| configuration | total samples/sec | vs best grid |", "|---|---:|---:|"]
    for n, v in results.items():
        rows.append(f"| {n} | {med[n]:.1f} ({min(v):.1f}-{max(v):.1f}) | "
                    f"{100 * med[n] / med[best]:.1f} % |")
    rows.append("")
    rows.append(f"best grid point: {best}")
    for i, lines in enumerate(logs):
        rows.append(f"autotune round {i}: {len(lines) - 2} scored points; best "
                    f"(hier_ar,hier_ag,cycle_ms,fusion_mb,score): {lines[-1] if lines else '?'}")
    text = "\n".join(rows) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
