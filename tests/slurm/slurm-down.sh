#!/usr/bin/env bash
# slurm-down.sh DIR: ends running jobs, then SIGTERMs every pid in
# DIR/run/pids at once and SIGKILLs what is left after 10 s.
D=$(realpath -m "${1:?dir}"); [ -f "$D/run/pids" ] || exit 0
pids=$(cat "$D/run/pids"); export SLURM_CONF=$D/slurm.conf
if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then # slurmstepd is not a child of slurmd
  scancel --user="$(id -un)" 2>/dev/null
  for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
fi
kill -TERM $pids 2>/dev/null
alive=""
for _ in $(seq 100); do
  alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break; sleep 0.1
done
[ -n "$alive" ] && kill -KILL $alive 2>/dev/null
exit 0
