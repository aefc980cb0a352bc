#!/usr/bin/env bash
# A worker's RSS and thread count after hvd::init + one allreduce, in both
# ways a worker process runs: under an hvactor::executor (the worker serves
# the driver's calls) and as an SPMD program under hvactor-run (no driver).
# Each rank reads its own /proc/self/status (benchmarks/worker_footprint.cpp).
#
#   benchmarks/worker_footprint.sh [BIN_DIR] [REPEATS]
#
# BIN_DIR holds worker_footprint and hvactor-run (default build/benchmarks
# and build/tools). A missing worker_footprint is compiled there against
# the libraries in $LD_LIBRARY_PATH's first folder (default the build
# tree's). To compare two builds, copy one's hvactor-run and .so files aside
# and run with LD_LIBRARY_PATH pointing at the copied libraries
# (LD_LIBRARY_PATH wins over the binaries' RUNPATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-$root/build/benchmarks}
run=$bench/hvactor-run
[[ -x $run ]] || run=$root/build/tools/hvactor-run
repeats=${2:-3}
if [[ ! -x $bench/worker_footprint ]]; then
  libs=${LD_LIBRARY_PATH:-}; libs=${libs%%:*}
  so() { if [[ -n $libs ]]; then echo "$libs/libhvactor_$1.so.0"; else echo "$root/build/$1/libhvactor_$1.so"; fi; }
  g++ -std=c++20 -O2 -I"$root/actors" -I"$root/collectives" -I"$root/runtime" \
    "$root/benchmarks/worker_footprint.cpp" -o "$bench/worker_footprint" \
    "$(so actors)" "$(so collectives)" "$(so runtime)" -lcaf_io -lcaf_core -lfmt -pthread \
    -Wl,-rpath,"$(dirname "$(so actors)")":"$(dirname "$(so collectives)")":"$(dirname "$(so runtime)")"
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 0; i < repeats; ++i)); do
  timeout 120 "$bench/worker_footprint" --num-workers 2 | grep '^executor rank' >>"$out"
  timeout 120 "$run" -np 2 -- "$bench/worker_footprint" spmd 2>/dev/null \
    | sed -n 's/.*\(spmd rank .*\)/\1/p' >>"$out"
done
# Median over the repeats, per mode and rank.
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, _, rank, rss, threads = line.split()
    rows.setdefault((mode, int(rank)), []).append((int(rss), int(threads)))
print(f"{'mode':<9} {'rank':>4} {'runs':>4} {'rss_mib':>8} {'threads':>7}")
for (mode, rank), xs in sorted(rows.items()):
    rss = statistics.median_low(x[0] for x in xs) / 1024
    thr = statistics.median_low(x[1] for x in xs)
    print(f"{mode:<9} {rank:>4} {len(xs):>4} {rss:>8.1f} {thr:>7}")
PY
