#!/usr/bin/env python3
"""scale_chart.py: the chart of docs/performance/scale.md, from the JSON
files benchmarks/scale_matrix.sh wrote.

    python3 benchmarks/scale_chart.py --tag TAG [--results benchmarks/results]
                                      [--out docs/performance/img/scale-start.svg]

Reads RESULTS/scale-TAG-<N>.json for every N there and draws, against the
node count (one rank per node): hvactor's start() to every rank's
hvd::init() done (median of the jobs after the first, min-max as error
bars), its first job (the binary shipped), the slowest rank's
registration and rendezvous phases, and Open MPI's mpirun to every
MPI_Init on the same nodes. gnuplot draws the SVG (run as a program, never
through a shell). Commit the SVG this writes.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows(results, tag):
    name = re.compile(rf"^scale-{re.escape(tag)}-(\d+)\.json$")
    out = []
    for f in os.listdir(results):
        m = name.match(f)
        if not m:
            continue
        with open(os.path.join(results, f), encoding="utf-8") as fh:
            doc = json.load(fh)
        rounds = doc["results"]
        later = [r for r in rounds[1:] if r["ok"]] or [r for r in rounds if r["ok"]]
        mpi = [m["total_ms"] / 1000 for m in doc.get("mpi", []) if m["ok"]]
        if not later:
            continue
        tot = [r["total_ms"] / 1000 for r in later]
        first = rounds[0]["total_ms"] / 1000 if rounds[0]["ok"] else float("nan")
        reg = statistics.median(r["registration_ms"]["max"] / 1000 for r in later)
        rdv = statistics.median(r["rendezvous_ms"]["max"] / 1000 for r in later)
        mp = (statistics.median(mpi), min(mpi), max(mpi)) if mpi else (float("nan"),) * 3
        out.append((int(m.group(1)), statistics.median(tot), min(tot), max(tot), first, reg, rdv)
                   + mp)
    return sorted(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "performance", "img",
                                                 "scale-start.svg"))
    a = p.parse_args()
    data = rows(a.results, a.tag)
    if not data:
        sys.exit(f"no scale-{a.tag}-N.json with a successful job under {a.results}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        dat = os.path.join(tmp, "scale.dat")
        with open(dat, "w", encoding="utf-8") as f:
            for r in data:
                f.write(" ".join("NaN" if x != x else f"{x:.4f}" for x in r) + "\n")
        xtics = ", ".join(f'"{r[0]}" {r[0]}' for r in data)
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w", encoding="utf-8") as f:
            f.write(f"""set terminal svg size 800,450 dynamic font "sans,12" background rgb "white"
set output "{a.out}"
set title "Job start on emulated nodes (1 rank per node, --cpus 1, 1 Gbit/s, mutual TLS)"
set xlabel "nodes"
set ylabel "seconds"
set logscale x 2
set logscale y 10
set xtics ({xtics})
set grid
set key top left
set xrange [{data[0][0] / 1.3}:{data[-1][0] * 1.3}]
plot "{dat}" using 1:2:3:4 with yerrorlines lw 2 lc rgb "#1f77b4" title "hvactor: start() to every hvd::init() (later jobs)", \\
     "{dat}" using 1:5 with linespoints lw 1 dt 2 lc rgb "#1f77b4" title "hvactor: first job (binary shipped)", \\
     "{dat}" using 1:6 with linespoints lw 1 lc rgb "#ff7f0e" title "slowest rank's registration", \\
     "{dat}" using 1:7 with linespoints lw 1 lc rgb "#2ca02c" title "slowest rank's rendezvous (hvd::init)", \\
     "{dat}" using 1:8:9:10 with yerrorlines lw 2 lc rgb "#d62728" title "Open MPI: mpirun to every MPI_Init"
""")
        subprocess.run(["gnuplot", script], check=True)
    print(a.out)


if __name__ == "__main__":
    main()
