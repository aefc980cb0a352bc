#!/usr/bin/env bash
# hvactor-bench train across 2 emulated nodes (hvactor-netcluster: a network
# namespace per node, HTB-shaped links, a real hvactor-node with TLS in each,
# 1 CPU per node, the head runs no worker), with and without
# --fp16-allreduce, on each link: world size 1 (one node) against world
# size 2 (one worker per node, every gradient crossing the link), Horovod's
# synthetic benchmark with its scaling efficiency. Needs root and a build
# with the LibTorch adapter (hvactor-bench train).
#
# usage: sudo benchmarks/netcluster_train.sh [--links "200mbit 1gbit 2.5gbit"]
#          [--model resnet50] [--iters 6] [--out DIR] [--build DIR]
# Writes DIR/netcluster-train-<model>-<link>-<fp32|fp16>.txt and .json (DIR
# defaults to benchmarks/results).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
links="200mbit 1gbit 2.5gbit" model=resnet50 iters=6
out="$root/benchmarks/results" build="$root/build"
usage() { sed -n '10,11p' "$0" | sed 's/^# //' >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --links) links=$2 ;; --model) model=$2 ;; --iters) iters=$2 ;;
    --out) out=$2 ;; --build) build=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ "$(id -u)" = 0 ] || { echo "netcluster_train.sh needs root (network namespaces, tc)" >&2; exit 2; }
tool="$build/tools/netcluster/hvactor-netcluster"
bench="$build/tools/hvactor-bench"
[ -x "$tool" ] && [ -x "$bench" ] || { echo "build $build first (hvactor-bench, hvactor-netcluster)" >&2; exit 2; }
case "$model" in
  resnet50) margs=(--model resnet50 --image-size 64 --batch-size 16) ;;
  mlp) margs=(--model mlp --batch-size 32) ;;
  *) echo "--model: resnet50 or mlp" >&2; exit 2 ;;
esac
mkdir -p "$out"
for link in $links; do
  for prec in fp32 fp16; do
    extra=(); [ "$prec" = fp16 ] && extra=(--fp16-allreduce)
    tag="netcluster-train-$model-$link-$prec"
    echo "== $tag" >&2
    # 2 nodes x 1 CPU: world size 2 must span both nodes.
    "$tool" up --name nt --nodes 2 --link "$link" --cpus 1 -- \
      "$bench" train "${margs[@]}" --num-warmup-batches 2 --num-batches-per-iter 2 \
      --num-iters "$iters" --threads 1 --scaling 1,2 --check "${extra[@]}" \
      --json "$out/$tag.json" > "$out/$tag.txt" 2>&1 \
      || { echo "$tag failed: $(tail -3 "$out/$tag.txt")" >&2; exit 1; }
    grep -E '^\|' "$out/$tag.txt" >&2 || tail -5 "$out/$tag.txt" >&2
  done
done
