#!/usr/bin/env bash
# Peak RSS of hvactor-run forwarding 2 ranks x MIB MiB of output (default 200):
#   to a file (stdout redirected), with --output-dir, and to a stalled reader
#   (a pipe nobody reads for STALL seconds, then drained).
# Usage: benchmarks/run_output.sh [HVACTOR_RUN] [MIB] [STALL]
# Prints one row per scenario: scenario, MiB forwarded, seconds, peak RSS (MB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=${1:-$here/../build/tools/hvactor-run}
mib=${2:-200}
stall=${3:-10}
gen=$here/run_output_gen.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() { # name, then the command; hvactor-run's peak RSS via GNU time
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  printf '%-16s %6d %8.1f %10.1f\n' "$name" $((2 * mib)) "$(echo "$end - $start" | bc)" \
    "$(echo "$(cat "$tmp/rss") / 1024" | bc -l)"
}

to_file() { /usr/bin/time -f %M -o "$tmp/rss" "$run" -np 2 -- "$gen" "$mib" > "$tmp/out"; }
to_dir() {
  /usr/bin/time -f %M -o "$tmp/rss" "$run" -np 2 --output-dir "$tmp/dir" -- "$gen" "$mib" \
    > /dev/null
}
stalled() {
  /usr/bin/time -f %M -o "$tmp/rss" "$run" -np 2 -- "$gen" "$mib" \
    | { sleep "$stall"; cat > "$tmp/out"; }
}

echo "# hvactor-run: $run"
echo "# 2 ranks x $mib MiB of 100-byte lines; stalled reader: ${stall} s, then drained"
printf '%-16s %6s %8s %10s\n' scenario MiB time_s peak_rss_MB
measure stdout_file to_file
lines=$(wc -l < "$tmp/out")
measure output_dir to_dir
measure stalled_pipe stalled
echo "# lines forwarded (stdout_file): $lines, expected $((2 * mib * 1048576 / 100))"
