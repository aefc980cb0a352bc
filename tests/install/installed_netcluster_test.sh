#!/usr/bin/env bash
# installed_netcluster_test.sh BUILD_DIR
#
# An installed hvactor runs across nodes. Installs the build tree into a
# temporary prefix (as the README shows), checks that the installed tools
# find their libraries only through RUNPATH $ORIGIN/../lib, then brings up
# an emulated 2-node cluster with the installed hvactor-netcluster and
# hvactor-node and runs the installed hvactor-bench allreduce across both
# nodes: its binary is shipped into the nodes' caches, where $ORIGIN/../lib
# does not exist, so its libraries must travel with it. Nothing is left.
# Registered with ctest as installed_netcluster_test (labels install,
# netcluster); exit 77 (skipped) without root or `ip netns`.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]] || ! ip netns list > /dev/null 2>&1; then
  echo "skipped: needs root and ip netns"
  exit 77
fi
build_dir=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hvactor-installed-netcluster.XXXXXX")
prefix="$work/prefix"
name="inst$((RANDOM % 100))"
cleanup() {
  # `up -- COMMAND` tears its cluster down itself; this is for an early exit.
  if [[ -x "$prefix/bin/hvactor-netcluster" ]]; then
    "$prefix/bin/hvactor-netcluster" down "$name" > /dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

config=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2> /dev/null || true)
cmake --install "$build_dir" --prefix "$prefix" --config "${config:-RelWithDebInfo}" > "$work/install.log"
for tool in hvactor-node hvactor-bench hvactor-netcluster; do
  [[ -x "$prefix/bin/$tool" ]] || fail "the install has no bin/$tool"
done
runpath=$(readelf -d "$prefix/bin/hvactor-bench" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[[ "$runpath" == '$ORIGIN/'* ]] || fail "installed hvactor-bench has RUNPATH '$runpath', not \$ORIGIN-relative"
[[ "$runpath" != *"$build_dir"* ]] || fail "installed hvactor-bench's RUNPATH names the build tree"

echo "== 2 emulated nodes, the installed hvactor-bench allreduce across them"
set +e
out=$(cd "$work" && timeout -k 10 240 "$prefix/bin/hvactor-netcluster" up --name "$name" --nodes 2 \
  --cpus 1 --link 1gbit --logs "$work/logs" -- \
  "$prefix/bin/hvactor-bench" allreduce --num-hosts 2 --per-host 1 -b 4 -e 16384 -f 16 --rounds 1 2>&1)
rc=$?
set -e
echo "$out"
if grep -q "error while loading shared libraries" <<< "$out" \
  || grep -rqs "error while loading shared libraries" "$work/logs"; then
  fail "a worker could not load its libraries"
fi
[[ $rc -eq 0 ]] || fail "hvactor-netcluster up -- hvactor-bench exited with $rc"
grep -Eq '^ *16384 ' <<< "$out" || fail "no 16 KiB row in hvactor-bench's table"
ip netns list | grep -q "^$name-" && fail "namespaces of $name are left"
echo "== installed_netcluster_test: OK"
