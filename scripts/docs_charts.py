#!/usr/bin/env python3
"""docs_charts.py: the benchmark pages' charts, from the committed results.

    python3 scripts/docs_charts.py [--results benchmarks/results] [--out docs/benchmarks/img]

Reads the JSON files hvactor-bench wrote under benchmarks/results/ and draws
one SVG per chart with gnuplot (run as a program, never through a shell):

  collectives-allreduce-np2.svg   hvactor-bench-allreduce-np2.json: busbw
                                  against size, hvactor and its peers
                                  (Open MPI, raw Gloo, torch.distributed)
  collectives-allgather-np2.svg   hvactor-bench-allgather-np2.json: the same
  collectives-broadcast-np2.svg   hvactor-bench-broadcast-np2.json: the same
  netcluster-train-resnet50.svg   netcluster-train-resnet50-LINK-fpN.json:
                                  img/sec of 1 worker and of 2 workers on 2
                                  emulated nodes, per link and gradient type

The multi-node allreduce chart (docs/netcluster-allreduce.svg) has its own
script, benchmarks/plot_netcluster.py. Commit the SVGs this writes.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = [("hvactor", "hvactor", "#1f77b4"), ("mpi", "Open MPI", "#d62728"),
         ("gloo", "raw Gloo", "#2ca02c"), ("torch", "torch.distributed", "#9467bd")]
LINKS = [("200mbit", "200 Mbit/s"), ("1gbit", "1 Gbit/s"), ("2.5gbit", "2.5 Gbit/s")]


def size_label(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def gnuplot(script, tmp):
    path = os.path.join(tmp, "plot.gp")
    with open(path, "w", encoding="utf-8") as f:
        f.write(script)
    subprocess.run(["gnuplot", path], check=True)


def quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sweep_chart(src, out, title, tmp):
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    rows = doc["results"]
    data = os.path.join(tmp, os.path.basename(out) + ".dat")
    with open(data, "w", encoding="utf-8") as f:
        for r in rows:
            vals = [r.get("busbw")]
            for key, _, _ in PEERS[1:]:
                vals.append(r.get("peers", {}).get(key, {}).get("busbw"))
            cells = ["NaN" if v is None or v <= 0 else repr(v) for v in vals]
            f.write(f"{r['size']} {' '.join(cells)}\n")
    present = [i for i, (key, _, _) in enumerate(PEERS)
               if i == 0 or any(key in r.get("peers", {}) for r in rows)]
    sizes = [r["size"] for r in rows]
    tics = ", ".join(f"{quote(size_label(s))} {s}" for s in sizes[::2])
    plots = ", ".join(
        f"{quote(data)} using 1:{i + 2} with linespoints lw 2 pt 7 ps 0.6 "
        f"lc rgb {quote(PEERS[i][2])} title {quote(PEERS[i][1])}" for i in present)
    machine = doc.get("machine", {})
    ranks = doc.get("settings", {}).get("ranks", "?")
    subtitle = f"{ranks} ranks, {machine.get('cores', '?')} cores ({machine.get('cpu_model', '?')})"
    gnuplot(f"""set terminal svg size 800,450 dynamic font "sans,12" background rgb "white"
set output {quote(out)}
set title {quote(title + ': ' + subtitle)}
set logscale x 2
set logscale y 10
set xtics ({tics}) rotate by -45
set xlabel "message size"
set ylabel "busbw, GB/s (log)"
set key bottom right
set grid
plot {plots}
""", tmp)


def train_chart(results, out, tmp):
    name = re.compile(r"^netcluster-train-resnet50-(200mbit|1gbit|2\.5gbit)-(fp16|fp32)\.json$")
    found = {}
    for f in sorted(os.listdir(results)):
        m = name.match(f)
        if not m:
            continue
        with open(os.path.join(results, f), encoding="utf-8") as fh:
            doc = json.load(fh)
        by_workers = {r["workers"]: r for r in doc["results"]}
        found[(m.group(1), m.group(2))] = by_workers
    if not found:
        return False
    data = os.path.join(tmp, "train.dat")
    with open(data, "w", encoding="utf-8") as f:
        for link, label in LINKS:
            for fp in ("fp32", "fp16"):
                r = found.get((link, fp))
                if r is None:
                    continue
                one = r.get(1, {}).get("total_mean", "NaN")
                two = r.get(2, {}).get("total_mean", "NaN")
                two_ci = r.get(2, {}).get("total_ci95", 0)
                f.write(f"{quote(label + ', ' + ('float16' if fp == 'fp16' else 'float32'))}"
                        f" {one} {two} {two_ci}\n")
    gnuplot(f"""set terminal svg size 800,450 dynamic font "sans,12" background rgb "white"
set output {quote(out)}
set title "ResNet-50 (64x64, batch 16) across 2 emulated nodes: img/sec by link and gradient type"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -30
set ylabel "img/sec (total)"
set yrange [0:*]
set key top left
set grid ytics
plot {quote(data)} using 2:(0):xtic(1) lc rgb "#7f7f7f" title "1 worker", \\
     '' using 3:4 lc rgb "#1f77b4" title "2 workers on 2 nodes (95% CI)"
""", tmp)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "img"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for op, title in (("allreduce", "hvactor-bench allreduce"),
                          ("allgather", "hvactor-bench allgather"),
                          ("broadcast", "hvactor-bench broadcast")):
            src = os.path.join(args.results, f"hvactor-bench-{op}-np2.json")
            if os.path.exists(src):
                out = os.path.join(args.out, f"collectives-{op}-np2.svg")
                sweep_chart(src, out, title, tmp)
                written.append(out)
        out = os.path.join(args.out, "netcluster-train-resnet50.svg")
        if train_chart(args.results, out, tmp):
            written.append(out)
    for w in written:
        print("wrote", os.path.relpath(w, ROOT))
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
