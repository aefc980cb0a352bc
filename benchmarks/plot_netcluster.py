#!/usr/bin/env python3
"""plot_netcluster.py: the multi-node allreduce results as one SVG.

    python3 benchmarks/plot_netcluster.py [--results benchmarks/results] [--out docs/netcluster-allreduce.svg]

Reads the JSON files benchmarks/netcluster_matrix.sh writes
(netcluster-LINK-NxK.json: hvactor-bench allreduce with --peer mpi,gloo) and
draws, per configuration, the share of each link a ring between the nodes
would fill (size / time x 2(n - 1)/n / link rate, n = nodes: docs/benchmarks/multi-node.md's
"link use") against the message size, for hvactor, Open MPI and raw Gloo,
with the 0.9 target. One panel per configuration found: rows are links,
columns nodes x ranks per node. Needs gnuplot (run as a program, never
through a shell).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

LINK_BYTES_PER_S = {"200mbit": 25e6, "1gbit": 125e6, "2.5gbit": 312.5e6}
NAME = re.compile(r"^netcluster-(200mbit|1gbit|2\.5gbit)-(\d+)x(\d+)\.json$")
SERIES = [("hvactor", "hvactor", "#1f77b4"), ("mpi", "Open MPI (TCP)", "#d62728"),
          ("gloo", "raw Gloo", "#2ca02c")]


def link_use(size, time_us, nodes, link):
    if not time_us or time_us <= 0:
        return None
    return size / (time_us * 1e-6) * 2 * (nodes - 1) / nodes / LINK_BYTES_PER_S[link]


def load(results):
    panels = {}
    for f in sorted(os.listdir(results)):
        m = NAME.match(f)
        if not m:
            continue
        link, nodes, per_host = m.group(1), int(m.group(2)), int(m.group(3))
        with open(os.path.join(results, f)) as fh:
            data = json.load(fh)
        rows = []
        for r in data["results"]:
            peers = r.get("peers", {})
            row = [r["size"], link_use(r["size"], r["time_us"], nodes, link)]
            for key, _, _ in SERIES[1:]:
                row.append(link_use(r["size"], peers.get(key, {}).get("time_us"), nodes, link))
            rows.append(row)
        panels[(link, nodes, per_host)] = rows
    return panels


def script(panels, datadir, out):
    links = [l for l in LINK_BYTES_PER_S if any(k[0] == l for k in panels)]
    shapes = sorted({(k[2], k[1]) for k in panels})
    lines = [
        f"set terminal svg size {360 * len(shapes)},{300 * len(links)} dynamic "
        "font 'sans,11' background rgb 'white'",
        f"set output '{out}'",
        f"set multiplot layout {len(links)},{len(shapes)} title "
        "'allreduce across emulated nodes: share of each link a ring fills (1.0 = the link)'",
        "set logscale x 2", "set xrange [4:2**27]", "set yrange [0:1.45]", "set ytics 0,0.2,1",
        "set grid",
        "set xtics ('4 B' 4, '256 B' 256, '16 KiB' 2**14, '1 MiB' 2**20, '64 MiB' 2**26)",
        "set key top left reverse Left font ',9'", "set xlabel 'message size'", "set ylabel 'link use'",
    ]
    for link in links:
        for per_host, nodes in shapes:
            key = (link, nodes, per_host)
            title = f"{nodes} nodes x {per_host} rank{'s' if per_host > 1 else ''}, {link}"
            lines.append(f"set title '{title}'")
            if key not in panels:
                lines.append("set multiplot next")
                continue
            path = os.path.join(datadir, f"{link}-{nodes}x{per_host}.dat")
            with open(path, "w") as fh:
                for row in panels[key]:
                    fh.write(" ".join("NaN" if v is None else repr(v) for v in row) + "\n")
            plots = [f"'{path}' using 1:{i + 2} with linespoints lw 2 pt 7 ps 0.5 lc rgb '{color}' "
                     f"title '{label}'" for i, (_, label, color) in enumerate(SERIES)]
            plots.append("0.9 with lines dt 2 lc rgb 'black' title 'target 0.9'")
            lines.append("plot " + ", ".join(plots))
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=os.path.join(here, "results"))
    p.add_argument("--out", default=os.path.join(here, "..", "docs", "netcluster-allreduce.svg"))
    a = p.parse_args()
    panels = load(a.results)
    if not panels:
        print(f"plot_netcluster: no netcluster-LINK-NxK.json under {a.results}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="plot_netcluster.") as tmp:
        gp = os.path.join(tmp, "plot.gp")
        with open(gp, "w") as fh:
            fh.write(script(panels, tmp, os.path.abspath(a.out)))
        try:
            subprocess.run(["gnuplot", gp], check=True)
        except FileNotFoundError:
            print("plot_netcluster: needs gnuplot (apt-get install gnuplot-nox)", file=sys.stderr)
            return 2
    # Every configuration found has its panel in the drawing.
    with open(a.out) as fh:
        svg = fh.read()
    missing = [f"{n} nodes x {k}" for (_, n, k) in panels if f"{n} nodes x {k}" not in svg]
    if missing:
        print(f"plot_netcluster: {a.out} lacks the panels of {', '.join(missing)}", file=sys.stderr)
        return 1
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
