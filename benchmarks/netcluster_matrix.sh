#!/usr/bin/env bash
# The tables of docs/benchmarks/multi-node.md: hvactor-bench allreduce
# on emulated clusters (hvactor-netcluster: a network namespace per node,
# HTB-shaped veth links through a bridge, a real hvactor-node with TLS in
# each) against Open MPI over TCP and raw Gloo on the same nodes, in the
# same run (hvactor-bench --peer mpi,gloo: one warm job per peer and round,
# the same calls per size, rounds interleaved). One cluster per
# configuration, torn down before the next. Needs root.
#
# usage: sudo benchmarks/netcluster_matrix.sh [--links "1gbit 2.5gbit"] [--nodes "2 4"]
#          [--per-host "1 2"] [--max 64M] [--rounds 3] [--out DIR] [--build DIR]
# Writes DIR/netcluster-<link>-<nodes>x<per-host>.txt and .json (DIR defaults
# to benchmarks/results).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
links="1gbit 2.5gbit" nodes="2 4" per_host="1 2" max=64M rounds=3
out="$root/benchmarks/results" build="$root/build"
usage() { sed -n '10,13p' "$0" | sed 's/^# //' >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --links) links=$2 ;; --nodes) nodes=$2 ;; --per-host) per_host=$2 ;;
    --max) max=$2 ;; --rounds) rounds=$2 ;; --out) out=$2 ;; --build) build=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ "$(id -u)" = 0 ] || { echo "netcluster_matrix.sh needs root (network namespaces, tc)" >&2; exit 2; }
tool="$build/tools/netcluster/hvactor-netcluster"
bench="$build/tools/hvactor-bench"
[ -x "$tool" ] && [ -x "$bench" ] || { echo "build $build first (hvactor-bench, hvactor-netcluster)" >&2; exit 2; }
mkdir -p "$out"
for link in $links; do
  for n in $nodes; do
    for k in $per_host; do
      tag="netcluster-$link-${n}x$k"
      echo "== $tag" >&2
      # Every node gets K CPUs' worth of slots; the head runs no ranks.
      "$tool" up --name nm --nodes "$n" --link "$link" --cpus "$k" -- \
        "$bench" allreduce --num-hosts "$n" --per-host "$k" -b 4 -e "$max" -w 3 \
        --rounds "$rounds" --check --peer mpi,gloo --json "$out/$tag.json" \
        > "$out/$tag.txt" 2>&1 || { echo "$tag failed: $(tail -3 "$out/$tag.txt")" >&2; exit 1; }
      grep -v '^#' "$out/$tag.txt" | tail -n +1 >&2
    done
  done
done
