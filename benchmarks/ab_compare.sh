#!/usr/bin/env bash
# ab_compare.sh: two builds of hvactor measured in interleaved rounds on an
# idle machine (the order alternating), for a before/after table
# (benchmarks/ab_table.py turns the log into it):
#   benchmarks/ab_compare.sh BEFORE_BUILD AFTER_BUILD OUT [ROUNDS] [PARTS]
# PARTS: any of control-plane, allreduce, elastic (default: all three):
# hvactor-bench control-plane (start(), call rate, run() / raw CAF),
# hvactor-bench allreduce -np 2 (executor and SPMD paths, 4 B-64 MiB) and
# elastic_recovery (recovery, join, commit + check).
set -u
if (($# < 3)); then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
declare -A dir=([before]=$1 [after]=$2)
out=$3
rounds=${4:-3}
parts=${5:-"control-plane allreduce elastic"}
{
  echo "# A/B: before=${dir[before]} after=${dir[after]}, $(date -u +%F), $(nproc) cores"
  echo "# per round and side: $parts"
} > "$out"
for r in $(seq 1 "$rounds"); do
  if ((r % 2)); then order="before after"; else order="after before"; fi
  for side in $order; do
    b=${dir[$side]}
    for part in $parts; do
      case $part in
        control-plane)
          echo "=== control-plane $side round $r" >> "$out"
          timeout 300 "$b/tools/hvactor-bench" control-plane --workers 1,4 --repeats 5 \
            --seconds 2 --peer caf --rounds 6 --check >> "$out" 2>&1 ;;
        allreduce)
          echo "=== allreduce $side round $r" >> "$out"
          timeout 600 "$b/tools/hvactor-bench" allreduce -np 2 -b 4 -e 64M -f 16 --rounds 1 \
            --path both >> "$out" 2>&1 ;;
        elastic)
          echo "=== elastic_recovery $side round $r" >> "$out"
          timeout 600 "$b/benchmarks/elastic_recovery" --rounds 5 >> "$out" 2>&1 ;;
      esac
    done
  done
done
echo "=== done" >> "$out"
