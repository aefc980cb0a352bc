#!/usr/bin/env bash
# hvactor::train's bytes across emulated machines, next to the link itself
# in the same cluster: iperf3 between a worker node and the head (both
# directions, the same byte counts as the shards and checkpoints, then 3 s),
# then benchmarks/train_overhead, whose bytes cross on the driver's data
# link. (Until issue 56 a second column ran the bytes as CAF messages;
# that route is gone, and the 2026-11-28 results keep its numbers.)
#
#   sudo benchmarks/train_link.sh RATE [ROWS] [CKPT_MIB] [REPEATS]
#
# RATE is a hvactor-netcluster link rate (1gbit, 2.5gbit); ROWS the
# dataset's float64 rows (4000000: 16 MB shards per rank); CKPT_MIB the
# checkpoint. 2 nodes x 1 CPU, mutual TLS, the driver on the head, one
# worker per node: every byte crosses the head's link.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rate=${1:?usage: train_link.sh RATE [ROWS] [CKPT_MIB] [REPEATS]}
rows=${2:-4000000}
ckpt=${3:-64}
repeats=${4:-3}
tool=$root/build/tools/netcluster/hvactor-netcluster
bench=$root/build/benchmarks/train_overhead
for need in "$tool" "$bench"; do
  [[ -x $need ]] || { echo "train_link.sh: build $need first" >&2; exit 2; }
done
command -v iperf3 >/dev/null || { echo "train_link.sh: needs iperf3 (scripts/setup.sh installs it)" >&2; exit 2; }

shard_mb=$((rows * 8 / 2 / 1000000))
echo "# train_link.sh $rate rows=$rows (shards of $shard_mb MB per rank) ckpt=${ckpt} MiB repeats=$repeats ($(git -C "$root" rev-parse --short HEAD), $(date -u +%F))"
# Inside the cluster (the head's namespace): the link, then the bytes.
inner=$(cat <<'EOS'
set -eu
head=${HVACTOR_ADDRESS%:*}
link() { # what: iperf3 from n1 to the head ($2 = -R: the head sends), $1 bytes
  iperf3 -s -1 -D -p 5990 >/dev/null
  sleep 0.3
  "$TOOL" exec "$NAME" n1 -- iperf3 -c "$head" -p 5990 $1 $2 -f m | awk '/receiver/ {print $7, $8}'
}
echo "## iperf3 (the link's rate, TCP, no TLS), median of 3"
for dir in "n1->head:" "head->n1:-R"; do
  flag=${dir#*:}
  for n in "-n ${CKPT}M" "-n $((SHARD_MB * 2))M" "-t 3"; do
    r=$( (link "$n" "$flag"; link "$n" "$flag"; link "$n" "$flag") | sort -n | sed -n 2p)
    echo "| ${dir%%:*} | $n | $r |"
  done
done
echo "## train_overhead, bulk bytes on the data link"
"$BENCH" --workers 2 --repeats "$REPEATS" --reports 300 --rows "$ROWS" --ckpt-mib "$CKPT" \
  --address "$HVACTOR_ADDRESS" $NETCLUSTER_TLS_ARGS 2>&1 | grep -E '^\||terminate|what\(\)|error'
EOS
)
name=tl$(($$ % 1000))
TOOL=$tool NAME=$name BENCH=$bench ROWS=$rows CKPT=$ckpt REPEATS=$repeats SHARD_MB=$shard_mb \
  "$tool" up --name "$name" --nodes 2 --link "$rate" --cpus 1 -- sh -c "$inner"
