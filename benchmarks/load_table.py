#!/usr/bin/env python3
"""The table of docs/benchmarks/load.md ("Collectives under load") from benchmarks/load_matrix.sh's
output (two builds, tagged before and after): per (busy per core, ranks,
size) the median over rounds of each build's time per call with every
round's value, Open MPI's median over all its runs, and the ratios.

usage: benchmarks/load_table.py matrix.txt [BEFORE_TAG AFTER_TAG]
"""
import collections
import statistics
import sys


def size_text(b):
    if b < 1024:
        return f"{b} B"
    if b < 1 << 20:
        return f"{b >> 10} KiB"
    return f"{b >> 20} MiB"


def value_text(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    before, after = (sys.argv[2], sys.argv[3]) if len(sys.argv) == 4 else ("before", "after")
    ours = collections.defaultdict(list)
    mpi = collections.defaultdict(list)
    for line in open(sys.argv[1]):
        p = line.split()
        if len(p) != 6 or line.startswith("#"):
            continue
        tag, np, load, size, hv, peer = p
        key = (int(load), int(np), int(size))
        ours[(tag,) + key].append(float(hv))
        mpi[key].append(float(peer))
    print(f"| busy per core | ranks | size | {before} | {after} | Open MPI | {after} / {before} "
          f"| MPI / {after} |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(mpi):
        b, a = ours[(before,) + key], ours[(after,) + key]
        if not a or not b:
            continue
        mb, ma, mm = statistics.median(b), statistics.median(a), statistics.median(mpi[key])
        print(f"| {key[0]} | {key[1]} | {size_text(key[2])} "
              f"| {value_text(mb)} ({', '.join(value_text(x) for x in b)}) "
              f"| {value_text(ma)} ({', '.join(value_text(x) for x in a)}) "
              f"| {value_text(mm)} | {ma / mb:.2f} | {mm / ma:.2f} |")


if __name__ == "__main__":
    main()
