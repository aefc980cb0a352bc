#!/usr/bin/env bash
# The table of docs/performance/scale.md: hvactor-bench scale on emulated
# clusters of N nodes (hvactor-netcluster: a network namespace per node,
# 1 Gbit/s shaped links, mutual TLS, --cpus 1, one rank per node), with
# Open MPI's job start across the same nodes as the peer (--peer mpi:
# mpirun's daemons started in the nodes' namespaces through
# `hvactor-netcluster mpi-agent`), rounds interleaved. One cluster per size,
# torn down before the next; a size whose cluster or jobs fail is recorded
# and the next one runs. Clusters of more than 8 nodes wait for
# /tmp/hvactor-bigrun.lock (flock), so big runs on a shared machine take
# turns. Needs root.
#
# usage: sudo benchmarks/scale_matrix.sh [--nodes "8 16 32 64 128"] [--rounds 3]
#          [--idle 10] [--peer mpi|none] [--tag NAME] [--name sb1] [--subnet-index 40]
#          [--out DIR] [--build DIR]
# Writes DIR/scale-TAG-<N>.txt and .json per size and DIR/scale-TAG.md (the
# table); TAG defaults to today's date, DIR to benchmarks/results.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nodes="8 16 32 64 128" rounds=3 idle=10 peer=mpi tag=$(date +%F) name=sb1 subnet=40
out="$root/benchmarks/results" build="$root/build"
usage() { sed -n '13,17p' "$0" | sed 's/^# //' >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --nodes) nodes=$2 ;; --rounds) rounds=$2 ;; --idle) idle=$2 ;; --peer) peer=$2 ;;
    --tag) tag=$2 ;; --name) name=$2 ;; --subnet-index) subnet=$2 ;;
    --out) out=$2 ;; --build) build=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ "$(id -u)" = 0 ] || { echo "scale_matrix.sh needs root (network namespaces, tc)" >&2; exit 2; }
tool="$build/tools/netcluster/hvactor-netcluster"
bench="$build/tools/hvactor-bench"
[ -x "$tool" ] && [ -x "$bench" ] || { echo "build $build first (hvactor-bench, hvactor-netcluster)" >&2; exit 2; }
peer_args=()
[ "$peer" = none ] || peer_args=(--peer "$peer")
mkdir -p "$out"
failed=0
for n in $nodes; do
  base="$out/scale-$tag-$n"
  echo "== $n nodes x 1 rank ($rounds rounds) -> $base.txt" >&2
  lock=()
  [ "$n" -le 8 ] || lock=(flock /tmp/hvactor-bigrun.lock)
  # Nodes join within --timeout; every round's job has the executor's own
  # timeouts (no --timeout here: what a user gets).
  start=$(date +%s)
  "${lock[@]}" "$tool" up --name "$name" --subnet-index "$subnet" --nodes "$n" --cpus 1 \
    --link 1gbit --timeout 300 -- \
    "$bench" scale --num-hosts "$n" --per-host 1 --rounds "$rounds" --idle-seconds "$idle" \
    "${peer_args[@]}" --json "$base.json" > "$base.txt" 2>&1
  rc=$?
  echo "# exit $rc after $(( $(date +%s) - start )) s (cluster up, rounds, teardown)" >> "$base.txt"
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    echo "   $n nodes: exit $rc: $(grep -v '^#' "$base.txt" | tail -2)" >&2
    "$tool" down "$name" > /dev/null 2>&1 || true
  fi
  grep '^# \(hvactor\|first\|later\|Open MPI\|memory\|idle\)' "$base.txt" >&2 || true
done

# The table (markdown) from the JSON files of this tag.
python3 - "$out" "$tag" "$nodes" > "$out/scale-$tag.md" <<'EOF'
import json, os, statistics, sys
out, tag, sizes = sys.argv[1], sys.argv[2], sys.argv[3].split()
def med(v):
    return statistics.median(v) if v else None
def f(x):
    return "-" if x is None else f"{x:,.0f}"
print(f"<!-- benchmarks/scale_matrix.sh, tag {tag}: medians over the jobs after the first "
      "(the first ships the binary); per-rank phases as p50 / max over ranks -->")
print("| nodes | jobs ok | first job ms | later jobs ms (min-max) | placement | shipping | "
      "process | registration | wait | rendezvous | Open MPI ms (min-max) | head MiB | "
      "node MiB p50/max | driver MiB | worker MiB | idle CPU % |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in sizes:
    path = os.path.join(out, f"scale-{tag}-{n}.json")
    if not os.path.exists(path):
        print(f"| {n} | failed: no results (see scale-{tag}-{n}.txt) |" + " |" * 14)
        continue
    doc = json.load(open(path))
    rounds = doc["results"]
    ok = [r for r in rounds if r["ok"]]
    later = [r for r in rounds[1:] if r["ok"]] or ok
    first = (f"{f(rounds[0]['total_ms'])} ({rounds[0].get('shipped_mib', 0):.0f} MiB shipped)"
             if rounds and rounds[0]["ok"] else "failed")
    tot = [r["total_ms"] for r in later]
    def ph(key):
        v = [r[key] for r in later if r.get(key)]
        if not v:
            return "-"
        return f"{med([x['p50'] for x in v]):,.0f} / {med([x['max'] for x in v]):,.0f}"
    mpi = [m["total_ms"] for m in doc.get("mpi", []) if m["ok"]]
    mpi_s = (f"{med(mpi):,.0f} ({min(mpi):,.0f}-{max(mpi):,.0f})" if mpi else
             ("failed" if doc.get("mpi") else "-"))
    last = ok[-1] if ok else None
    mem = lambda k: f"{last['memory_mib'][k]:.0f}" if last else "-"
    nodes_mib = (f"{med(last['memory_mib']['nodes']):.0f} / {max(last['memory_mib']['nodes']):.0f}"
                 if last and last["memory_mib"]["nodes"] else "-")
    workers_mib = f"{med(last['memory_mib']['workers']):.0f}" if last else "-"
    idle = doc.get("idle_cpu")
    print(f"| {n} | {len(ok)}/{len(rounds)} | {first} | "
          f"{f'{f(med(tot))} ({f(min(tot))}-{f(max(tot))})' if tot else '-'} | "
          f"{f(med([r['placement_ms'] for r in later]))} | {f(med([r['shipping_ms'] for r in later]))} | "
          f"{ph('process_ms')} | {ph('registration_ms')} | {ph('wait_ms')} | {ph('rendezvous_ms')} | "
          f"{mpi_s} | {mem('head')} | {nodes_mib} | {mem('driver')} | {workers_mib} | "
          f"{'-' if not idle else format(idle['total'], '.1f')} |")
EOF
cat "$out/scale-$tag.md" >&2
exit $((failed > 0))
