#!/usr/bin/env bash
# A worker's RSS and thread count after hvd::init + one allreduce, in both
# ways a worker process runs: under an hvactor::executor (the worker serves
# the driver's calls) and as an SPMD program under hvactor-run (no driver).
# Each rank reads its own /proc/self/status (benchmarks/worker_footprint.cpp).
#
#   benchmarks/worker_footprint.sh [BIN_DIR] [REPEATS]
#
# BIN_DIR holds worker_footprint and hvactor-run (default build/benchmarks
# and build/tools; the worker_footprint target builds it). To compare two
# builds, copy one's binaries and .so files aside and run with
# LD_LIBRARY_PATH pointing at the copied libraries (LD_LIBRARY_PATH wins
# over the binaries' RUNPATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-$root/build/benchmarks}
run=$bench/hvactor-run
[[ -x $run ]] || run=$root/build/tools/hvactor-run
repeats=${2:-3}
if [[ ! -x $bench/worker_footprint ]]; then
  echo "worker_footprint.sh: no $bench/worker_footprint; build it: cmake --build build --target worker_footprint" >&2
  exit 2
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
