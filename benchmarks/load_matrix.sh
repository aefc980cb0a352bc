#!/usr/bin/env bash
# The table of docs/benchmarks/load.md ("Collectives under load"): hvactor-bench allreduce
# against Open MPI with 0, 1 and 2 busy threads per core, 2 and 4 ranks,
# 4 B to 64 MiB, for two builds of hvactor-bench run alternately, ROUNDS
# times. One job per size, long enough to average over many scheduler
# slices (see the iteration counts below). Prints one line per job:
#
#   <tag> <ranks> <busy per core> <bytes> <hvactor us per call> <Open MPI us per call>
#
# usage: benchmarks/load_matrix.sh [--rounds N] TAG=PATH/hvactor-bench [TAG=PATH ...]
#   e.g. benchmarks/load_matrix.sh before=/tmp/base/build/tools/hvactor-bench \
#          after=build/tools/hvactor-bench > matrix.txt
# A build's libraries are found through its RUNPATH (or LD_LIBRARY_PATH).
set -euo pipefail

rounds=3
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "usage: $0 [--rounds N] TAG=PATH/hvactor-bench ..." >&2; exit 2 ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "usage: $0 [--rounds N] TAG=PATH/hvactor-bench ..." >&2; exit 2; }

# size and timed calls; 4 loaded ranks on 2 cores take longer per call.
sizes() {
  if [ "$1" -gt 2 ] && [ "$2" -gt 0 ]; then
    echo "4:2000 16K:1000 256K:300 4M:30 64M:5"
  else
    echo "4:100000 16K:5000 256K:1000 4M:100 64M:10"
  fi
}

for ((round = 1; round <= rounds; ++round)); do
  for np in 2 4; do
    for load in 0 1 2; do
      for build in "${builds[@]}"; do
        tag="${build%%=*}" bench="${build#*=}"
        for spec in $(sizes "$np" "$load"); do
          size="${spec%%:*}" iters="${spec#*:}"
          timeout 600 "$bench" allreduce -n "$np" -b "$size" -e "$size" --iters "$iters" \
              -w $((iters / 10 + 1)) --peer mpi --load "$load" 2>&1 \
            | awk -v t="$tag" -v np="$np" -v l="$load" '/^ +[0-9]/ {print t, np, l, $1, $5, $9}'
        done
      done
    done
  done
done
