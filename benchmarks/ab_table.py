#!/usr/bin/env python3
"""ab_table.py: the before/after table of an ab_compare.sh log (Markdown).

    python3 benchmarks/ab_table.py LOG [LOG ...] [--before-label TEXT]

Each row lists every round's value per side; the last column says whether
the after side's median lies within the before side's spread or better
(lower times, higher rates). Several logs add up (e.g. more rounds of one
part).
"""
import argparse
import re
import sys
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("logs", nargs="+")
ap.add_argument("--before-label", default="before")
args = ap.parse_args()
sections = []
for n, f in enumerate(args.logs):
    parts = re.split(r"^=== (\S+) (before|after) round (\d+)\n", open(f).read(), flags=re.M)
    for i in range(1, len(parts) - 1, 4):
        sections += [None, parts[i], parts[i + 1], str(1000 * n + int(parts[i + 2])), parts[i + 3]]
data={}  # (metric, side) -> list by round
def add(metric, side, r, v):
    data.setdefault((metric, side), {})[r]=v
for i in range(0, len(sections), 5):
    kind, side, r, body = sections[i+1], sections[i+2], int(sections[i+3]), sections[i+4]
    if kind=="control-plane":
        for m in re.finditer(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", body, re.M):
            w=m.group(1)
            add(f"start() {w} worker{'s' if w!='1' else ''}, p50 ms", side, r, float(m.group(2)))
            add(f"sync run() calls/s, {w} worker{'s' if w!='1' else ''}", side, r, float(m.group(4)))
        m=re.search(r"run / raw CAF ([\d.]+)", body)
        if m: add("run() / raw CAF (median of 6)", side, r, float(m.group(1)))
    elif kind=="allreduce":
        for m in re.finditer(r"^\s+(\d+)\s+\d+\s+float\s+sum\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)", body, re.M):
            size=int(m.group(1))
            lab={4:"4 B",64:"64 B",1024:"1 KiB",16384:"16 KiB",262144:"256 KiB",4194304:"4 MiB",67108864:"64 MiB"}[size]
            add(f"allreduce {lab}, executor us", side, r, float(m.group(2)))
            add(f"allreduce {lab}, SPMD us", side, r, float(m.group(3)))
    elif kind=="elastic_recovery":
        m=re.search(r"worker SIGKILL -> survivors' next commit \(recovery\)\s+\|\s+([\d.]+)", body)
        if m: add("elastic: SIGKILL -> survivors' next commit, ms", side, r, float(m.group(1)))
        m=re.search(r"host appears -> grown world's first commit \(join\)\s+\|\s+([\d.]+)", body)
        if m: add("elastic: host appears -> grown world's first commit, ms", side, r, float(m.group(1)))
        m=re.search(r"\| epoch counter\s+\|\s+([\d.]+)\s+\|\s+([\d.]+)", body)
        if m: add("elastic: commit + check of an epoch counter, us", side, r, float(m.group(1))+float(m.group(2)))
metrics=[]
for (m,s) in data:
    if m not in metrics: metrics.append(m)
def fmt(v):
    return f"{v:,.0f}" if v>=1000 else (f"{v:.1f}" if v>=10 else f"{v:.2f}")
print(f"| | {args.before_label} | after | within the before spread or better |")
print("|---|---|---|---|")
lower_better=lambda m: not ("calls/s" in m or "raw CAF" in m)
for m in metrics:
    b=data.get((m,"before"),{}); a=data.get((m,"after"),{})
    bv=[b[k] for k in sorted(b)]; av=[a[k] for k in sorted(a)]
    if not bv or not av: continue
    med=lambda xs: sorted(xs)[len(xs)//2]
    if lower_better(m): ok = med(av) <= max(bv)
    else: ok = med(av) >= min(bv)
    print(f"| {m} | {', '.join(fmt(x) for x in bv)} | {', '.join(fmt(x) for x in av)} | {'yes' if ok else 'NO'} |")
