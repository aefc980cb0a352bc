#!/usr/bin/env bash
# hvactor_bench_train_test.sh BUILD_DIR: hvactor-bench train on the
# embedded cluster: the MLP over --scaling 1,2 with its efficiency table,
# ResNet-50 (small images) with fp16 allreduce, both --check'ed (every rank
# ends with the same trained parameters), their JSON validated against the
# documented fields, and clear errors for bad options.
set -uo pipefail
B=$(realpath "${1:?build dir}"); BENCH="$B/tools/hvactor-bench"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if timeout 240 "$BENCH" train --model mlp --scaling 1,2 --batch-size 16 --num-warmup-batches 2 \
     --num-batches-per-iter 3 --num-iters 4 --threads 1 --check --json "$T/mlp.json" \
     --csv "$T/mlp.csv" > "$T/mlp.out" 2>&1 \
   && python3 - "$T/mlp.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "hvactor-bench" and d["subcommand"] == "train"
for k in ("cpu_model", "cores", "nics", "hvactor_version", "node_ids", "path"):
    assert k in d["machine"], k
s = d["settings"]
assert s["model"] == "mlp" and s["unit"] == "samples/sec" and s["batch_size"] == 16
assert s["num_iters"] == 4 and s["num_batches_per_iter"] == 3 and s["scaling"] == [1, 2]
assert s["fp16_allreduce"] is False and s["check"] is True
rs = d["results"]
assert [r["workers"] for r in rs] == [1, 2], rs
for r in rs:
    for k in ("params", "threads", "per_worker_mean", "per_worker_ci95", "total_mean",
              "total_ci95", "efficiency", "wrong", "samples", "path"):
        assert k in r, k
    assert r["params"] == 1024 * 1024 * 2 + 1024 * 2 + 1024 * 10 + 10, r["params"]
    assert r["wrong"] == 0 and len(r["samples"]) == 4 and min(r["samples"]) > 0
    mean = sum(r["samples"]) / 4
    assert abs(r["per_worker_mean"] - mean) < 1e-2 * mean, (r["per_worker_mean"], mean)
    assert abs(r["total_mean"] - r["workers"] * r["per_worker_mean"]) < 1e-2 * r["total_mean"]
assert rs[0]["efficiency"] == 1.0
eff = rs[1]["per_worker_mean"] / rs[0]["per_worker_mean"]
assert abs(rs[1]["efficiency"] - eff) < 1e-3, (rs[1]["efficiency"], eff)
PY
then
  out="$T/mlp.out"
  grep -q "^Iter #3: .* samples/sec per worker" "$out" \
    && grep -q "^Total samples/sec on 2 worker(s): .* +-" "$out" \
    && grep -q "^Check: 2 of 2 workers end with the same, finite, trained parameters" "$out" \
    && grep -Eq "^\| +2 \| .* \| .* \| +[0-9.]+% \|" "$out" \
    && [ "$(head -1 "$T/mlp.csv")" = "workers,per_worker_mean,per_worker_ci95,total_mean,total_ci95,efficiency,wrong" ] \
    && echo "ok: train --model mlp --scaling 1,2: Horovod's lines, efficiency table, checked, JSON and CSV" \
    || fail "train mlp output: $(cat "$out")"
else
  fail "train --model mlp --scaling 1,2: $(tail -5 "$T/mlp.out")"
fi

# ResNet-50 (torchvision's parameter count) on 32x32 images, 2 workers,
# gradients as float16 on the wire. (With batch 2 the last batch norm sees
# 2 values per channel and its gradients overflow float16: batch 4.)
if timeout 240 "$BENCH" train --model resnet50 --image-size 32 --batch-size 4 -np 2 \
     --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 2 --threads 1 --fp16-allreduce \
     --check --json "$T/resnet.json" > "$T/resnet.out" 2>&1 \
   && python3 - "$T/resnet.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["settings"]
assert s["model"] == "resnet50" and s["unit"] == "img/sec" and s["fp16_allreduce"] is True
(r,) = d["results"]
assert r["workers"] == 2 and r["params"] == 25557032, r["params"]
assert r["wrong"] == 0 and len(r["samples"]) == 2
assert len(d["machine"]["node_ids"]) == 2
PY
then
  # --bind-to auto: one torch thread each and a core each (on 2+ cores).
  bound="a core each"; [ "$(nproc)" -ge 2 ] || bound="unbound"
  grep -q "float16 on the wire" "$T/resnet.out" \
    && grep -q "^Number of workers: 2 (1 torch thread(s) each, $bound)" "$T/resnet.out" \
    && grep -q "^Check: 2 of 2 workers" "$T/resnet.out" \
    && echo "ok: train --model resnet50 --fp16-allreduce: 25557032 parameters, ranks identical, $bound (--bind-to auto)" \
    || fail "train resnet50 output: $(cat "$T/resnet.out")"
else
  fail "train --model resnet50: $(tail -5 "$T/resnet.out")"
fi

check_bad() { # expected-text args...
  local want=$1; shift
  out=$(timeout 30 "$BENCH" train "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$want" <<< "$out"; then echo "ok: train $* -> $out"
  else fail "train $*: exit $rc: $out"; fi
}
check_bad "--model must be mlp or resnet50 (got 'vgg16')" --model vgg16
check_bad "--batch-size must be in 1..65536 (got 0)" --batch-size 0
check_bad "--scaling 1,x: 'x' is not a number" --scaling 1,x
check_bad "--scaling gives the world sizes: not with -np" --scaling 1,2 -np 2
check_bad "batch normalization needs more than one value per channel" --image-size 32 --batch-size 1
check_bad "--image-size must be in 32..4096 (got 8)" --image-size 8
check_bad "GiB per worker" --batch-size 65536 --image-size 224
check_bad "--batch-size abc: not a number" --batch-size abc
# --bind-to auto with more torch threads than one: unbound.
timeout 120 "$BENCH" train --model mlp -np 2 --num-warmup-batches 0 --num-batches-per-iter 1 \
    --num-iters 1 --threads 2 > "$T/threads2.out" 2>&1 \
  && grep -q "^Number of workers: 2 (2 torch thread(s) each, unbound)" "$T/threads2.out" \
  && echo "ok: train --threads 2: --bind-to auto leaves the workers unbound" \
  || fail "train --threads 2: $(cat "$T/threads2.out")"
check_bad "--bind-to must be auto, core or none (got 'x')" --bind-to x
check_bad "--num-iters in 1..100000" --num-iters 0
check_bad "unexpected argument 'extra'" extra
timeout 10 "$BENCH" train --help | grep -q -- "--fp16-allreduce" && echo "ok: train --help" \
  || fail "train --help"

[ "$failures" = 0 ] || { echo "hvactor_bench_train_test: $failures failure(s)"; exit 1; }
