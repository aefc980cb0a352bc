#!/usr/bin/env bash
# slurm_test.sh BUILD_DIR: hvactor-run on a real (emulated) Slurm cluster of
# 3 nodes with 2 CPUs and 2 fake GPUs each, brought up by slurm-up.sh and torn
# down by pid. Skips (77) without root or without Slurm's daemons.
#   1. salloc -N3 --ntasks-per-node=2: 6 ranks, 2 per node (n1, n2, n3) in
#      the allocation's order, local ranks 0 and 1 on each,
#      CUDA_VISIBLE_DEVICES from Slurm
#   2. a rank exiting 3 makes salloc exit 3, naming the rank
#   3. sbatch, polled with squeue: ExitCode=0:0 and every rank in the output
#   4. hvactor-run --driver: an executor program with num_hosts=3
#   5. scancel of a running job leaves no hvactor process
#   6. a node whose hvactor-node cannot start is named at once
#   8. off loopback (this host's own address): per-job CA, mutual TLS
#   9. hvactor-bench in an allocation: 2 nodes x 2 tasks, checked, node ids; train
#   7. nothing is left: no hvactor-node, no rank, no per-job TLS or work directory
set -uo pipefail
B=$(realpath "${1:?build dir}")
HERE=$(cd "$(dirname "$0")" && pwd)
RUN="$B/tools/hvactor-run"; PROG="$B/tests/integration/run_program"
DRIVER="$B/tests/integration/cluster_driver"
if [ "$(id -u)" != 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "SKIP: needs root and slurmctld/slurmd/munge (scripts/setup.sh installs them)"; exit 77
fi
D=$(mktemp -d /tmp/hvactor-slurm.XXXXXX)
trap '"$HERE/slurm-down.sh" "$D"; rm -rf "$D"' EXIT
# Ports of our own, so that a second run on the machine does not collide;
# all below 32768, where the kernel's ephemeral ports begin.
export SLURM_TEST_CTLD_PORT=$((20000 + RANDOM % 5000)) SLURM_TEST_SLURMD_PORT=$((25000 + RANDOM % 5000))
SLURM_TEST_GPUS=2 "$HERE/slurm-up.sh" "$D" 3 2 || { echo "FAIL: slurm-up"; exit 1; }
export SLURM_CONF=$D/slurm.conf
failures=0
# Per-job work dirs (the head's, every node's) already here, from elsewhere.
WORK="${TMPDIR:-/tmp}/hvactor-$(id -u)"
work_before=$(ls -d "$WORK"/slurm-* 2>/dev/null | sort)
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# 1. placement and environment
out=$(timeout 120 salloc -N3 --ntasks-per-node=2 --cpus-per-task=1 --gres=gpu:2 \
      "$RUN" -- "$PROG" where 2>"$D/1.err"); rc=$?
echo "$out" | sed 's/^/  | /'
where=$(echo "$out" | grep -o 'where rank=.*' | sort)
if [ "$rc" != 0 ]; then fail "1: salloc exit $rc: $(tail -5 "$D/1.err")"
elif [ "$(echo "$where" | grep -c .)" != 6 ]; then fail "1: $(echo "$where" | grep -c .) ranks, want 6"
else
  hosts=$(echo "$where" | grep -o 'host=[^ ]*' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  locals=$(echo "$where" | sed 's/.*host=\([^ ]*\) local=\([^ ]*\).*/\1:\2/' | sort | tr '\n' ' ')
  cvds=$(echo "$where" | grep -o 'cvd=[^ ]*' | sort -u | tr '\n' ' ')
  [ "$hosts" = " 2 host=n1; 2 host=n2; 2 host=n3;" ] || fail "1: hosts $hosts"
  [ "$locals" = "n1:0 n1:1 n2:0 n2:1 n3:0 n3:1 " ] || fail "1: local ranks $locals"
  [ "$cvds" = "cvd=0,1 " ] || fail "1: CUDA_VISIBLE_DEVICES $cvds"
  order=$(echo "$where" | sed 's/where rank=\([0-9]*\) host=\([^ ]*\).*/\1:\2/' | sort -n | tr '\n' ' ')
  [ "$order" = "0:n1 1:n1 2:n2 3:n2 4:n3 5:n3 " ] || fail "1: rank order $order (want the allocation's)"
  ok "1: 6 ranks, 2 per node, local ranks 0/1, CUDA_VISIBLE_DEVICES 0,1"
fi

# 2. exit status
timeout 120 salloc -N3 --ntasks-per-node=1 "$RUN" -- "$PROG" fail 1 >"$D/2.out" 2>"$D/2.err"; rc=$?
if [ "$rc" = 3 ] && grep -q "rank 1" "$D/2.err"; then ok "2: salloc exit 3 naming rank 1"
else fail "2: exit $rc, stderr: $(tail -3 "$D/2.err")"; fi

# 3. batch job polled with squeue
jid=$(sbatch --parsable -N3 --ntasks-per-node=1 -o "$D/%j.out" --wrap "$RUN -- $PROG ranks")
for _ in $(seq 600); do [ -z "$(squeue -h -j "$jid" -o %i 2>/dev/null)" ] && break; sleep 0.1; done
code=$(scontrol show job "$jid" 2>/dev/null | grep -o 'ExitCode=[0-9:]*' | head -1)
lines=$(grep -c 'sum 3' "$D/$jid.out" 2>/dev/null)
if [ "$code" = "ExitCode=0:0" ] && [ "$lines" = 3 ]; then ok "3: sbatch job $jid $code, 3 ranks"
else fail "3: job $jid $code, $lines rank lines: $(tail -5 "$D/$jid.out")"; fi

# 4. an executor-API driver
timeout 120 salloc -N3 --ntasks-per-node=1 "$RUN" --driver -- "$DRIVER" hosts 3 1 >"$D/4.out" 2>"$D/4.err"; rc=$?
nodes=$(grep '^NODES' "$D/4.out" | tr ' ' '\n' | grep -v NODES | sort | tr '\n' ' ')
if [ "$rc" = 0 ] && [ "$nodes" = "n1 n2 n3 " ] && grep -q '^DONE' "$D/4.out"; then ok "4: --driver ran num_hosts=3 on n1 n2 n3"
else fail "4: exit $rc, NODES '$nodes': $(tail -5 "$D/4.err")"; fi

# 5. scancel mid-run
jid=$(sbatch --parsable -N3 --ntasks-per-node=1 -o "$D/%j.out" --wrap "$RUN -- $PROG sleep")
for _ in $(seq 300); do [ "$(grep -c '^\[1,[0-9]\]<stdout>:pid' "$D/$jid.out" 2>/dev/null)" = 3 ] && break; sleep 0.1; done
pids=$(grep -o '<stdout>:pid [0-9]*' "$D/$jid.out" | awk '{print $2}' | tr '\n' ' ')
scancel "$jid"
for _ in $(seq 300); do [ -z "$(squeue -h -j "$jid" -o %i 2>/dev/null)" ] && break; sleep 0.1; done
sleep 1
left=$(pgrep -f "$PROG sleep" | tr '\n' ' ')
nodes_left=$(pgrep -f "hvactor-node --slurm" | tr '\n' ' ')
if [ -n "$pids" ] && [ -z "$left" ] && [ -z "$nodes_left" ]; then ok "5: scancel left no rank ($pids) and no hvactor-node"
else fail "5: ranks '$pids', left: ranks '$left' nodes '$nodes_left'"; fi

# 6. one node's hvactor-node cannot start
cat > "$D/broken-node.sh" <<EOF
#!/usr/bin/env bash
[ "\$SLURMD_NODENAME" = n3 ] && { echo "hvactor-node: not installed on n3" >&2; exit 127; }
exec "$B/tools/hvactor-node" "\$@"
EOF
chmod +x "$D/broken-node.sh"
start=$(date +%s)
HVACTOR_NODE_BINARY="$D/broken-node.sh" timeout 120 salloc -N3 --ntasks-per-node=1 \
  "$RUN" --timeout 20 -- "$PROG" ranks >"$D/6.out" 2>"$D/6.err"; rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" != 0 ] && grep -q "hvactor-node on node n3 of Slurm job .* failed before joining" "$D/6.err" \
   && [ "$took" -lt 30 ]; then
  ok "6: exit $rc in ${took}s: $(grep 'failed before joining' "$D/6.err" | head -1 | cut -c1-160)"
else fail "6: exit $rc in ${took}s: $(tail -3 "$D/6.err")"; fi

# 8. off loopback: the head on this host's own address, a per-job CA, every
#    connection mutual TLS (hvactor-node refuses a non-loopback address
#    without TLS, so a run that works used it), the CA removed afterwards
ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
if [ -n "$ip" ]; then
  timeout 120 salloc -N3 --ntasks-per-node=1 "$RUN" --bind "$ip" -- "$PROG" ranks >"$D/8.out" 2>"$D/8.err"; rc=$?
  if [ "$rc" = 0 ] && [ "$(grep -c 'sum 3' "$D/8.out")" = 3 ] && grep -q "head on $ip" "$D/8.err"; then
    ok "8: head on $ip with a per-job CA, 3 ranks"
  else fail "8: exit $rc: $(tail -5 "$D/8.err")"; fi
else
  echo "skip 8: no non-loopback IPv4 address"
fi

# 9. hvactor-bench inside an allocation brings its cluster up through
# hvactor-run and takes the allocation's shape (2 nodes x 2 tasks).
BENCH="$B/tools/hvactor-bench"
timeout 120 salloc -N2 --ntasks-per-node=2 "$BENCH" allreduce -e 256K -f 16 --iters 3 --check \
  --json "$D/9.json" >"$D/9.out" 2>"$D/9.err"; rc=$?
if [ "$rc" = 0 ] && python3 - "$D/9.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["ranks"] == 4 and d["settings"]["num_hosts"] == 2, d["settings"]
assert sorted(d["machine"]["node_ids"]) == ["n1", "n1", "n2", "n2"], d["machine"]["node_ids"]
assert "hierarchical" in d["machine"]["path"], d["machine"]["path"]
assert d["results"] and all(r["wrong"] == 0 for r in d["results"])
# The SPMD path, on the same cluster after the workers' rounds.
assert all(r["peers"]["spmd"]["wrong"] == 0 and r["peers"]["spmd"]["time_us"] > 0
           for r in d["results"]), [r["peers"] for r in d["results"]]
PY
then ok "9: hvactor-bench in salloc -N2 --ntasks-per-node=2: 4 ranks on n1 n2, hierarchical, checked; the SPMD path after them"
else fail "9: exit $rc: $(tail -5 "$D/9.out") $(tail -5 "$D/9.err")"; fi
# ... and train (hvactor-bench-train, exec'ed) the same way, where LibTorch is.
if [ -x "$B/tools/hvactor-bench-train" ]; then
  timeout 180 salloc -N2 --ntasks-per-node=1 "$BENCH" train --model mlp --batch-size 8 \
    --num-warmup-batches 1 --num-batches-per-iter 2 --num-iters 2 --check --json "$D/9t.json" \
    >"$D/9t.out" 2>"$D/9t.err"; rc=$?
  if [ "$rc" = 0 ] && grep -q "^Check: 2 of 2 workers" "$D/9t.out" \
     && python3 -c "import json,sys; d=json.load(open('$D/9t.json')); sys.exit(0 if sorted(d['machine']['node_ids'])==['n1','n2'] else 1)"; then
    ok "9: hvactor-bench train in salloc -N2: 2 workers on n1 n2, checked"
  else fail "9 train: exit $rc: $(tail -5 "$D/9t.out") $(tail -5 "$D/9t.err")"; fi
fi

# 7. nothing left
sleep 1
# (Not by the rank program's name: other suites may run it meanwhile.)
left=$(pgrep -f -- "hvactor-node --slurm|--node-id hvactor-run-" | tr '\n' ' ')
[ -z "$left" ] && ok "7: no hvactor process left" || fail "7: left: $left ($(ps -o pid,args -p ${left// /,} 2>/dev/null | tail -n +2))"
ls -d "$HOME"/.hvactor/slurm-* >/dev/null 2>&1 && fail "7: per-job TLS directories left in $HOME/.hvactor"
work_after=$(ls -d "$WORK"/slurm-* 2>/dev/null | sort)
[ "$work_after" = "$work_before" ] && ok "7: no per-job work directory left in $WORK" \
  || fail "7: per-job work directories left: $(comm -13 <(echo "$work_before") <(echo "$work_after") | tr '\n' ' ')"

echo "slurm_test: $failures failure(s)"
[ "$failures" = 0 ]
