#!/usr/bin/env bash
# run_install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR
#
# Installs an already-built hvactor build tree into a temporary prefix, then
# configures and builds the consumer project (tests/install/consumer) against
# it with find_package(hvactor), runs it, and removes everything again. When
# the tree has the LibTorch adapter, it also builds tests/install/
# torch_consumer with find_package(hvactor COMPONENTS torch) and runs it on
# two ranks under the installed hvactor-run.
# Exits non-zero on any failure. Registered with ctest as install_find_package.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR CONSUMER_SOURCE_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
consumer_src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/hvactor-install-test.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

prefix="$work/prefix"
consumer_build="$work/consumer-build"

# Use the same build type as the main tree (multi-config generators need it).
config=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
config=${config:-RelWithDebInfo}

echo "== installing $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" --config "$config"

config_dir=$(find "$prefix" -name hvactorConfig.cmake -printf '%h\n' | head -n1)
if [[ -z "$config_dir" ]]; then
  echo "no hvactorConfig.cmake under $prefix" >&2
  exit 1
fi

echo "== checking the installed headers"
# Only the public API is installed: every header is reachable from
# <hvactor/hvactor.hpp> or <hvactor/tune.hpp> (or is the LibTorch adapter), and none of them
# includes an internal one (which is not installed).
include_dir="$prefix/include"
if grep -rln '#include "internal/' "$include_dir"; then
  echo "installed headers include internal ones (listed above)" >&2
  exit 1
fi
reachable=$(mktemp "$work/reachable.XXXXXX")
queue=(hvactor/hvactor.hpp hvactor/tune.hpp)
while [[ ${#queue[@]} -gt 0 ]]; do
  h=${queue[0]}
  queue=("${queue[@]:1}")
  grep -qx "$h" "$reachable" && continue
  echo "$h" >> "$reachable"
  [[ -f "$include_dir/$h" ]] || { echo "missing installed header $h" >&2; exit 1; }
  while read -r next; do
    queue+=("$next")
  done < <(sed -n 's/^#include [<"]\(hvactor\/[^>"]*\)[>"].*/\1/p' "$include_dir/$h")
done
while read -r h; do
  rel=${h#"$include_dir/"}
  case "$rel" in
    hvactor/torch.hpp | hvactor/torch_state.hpp | hvactor/distributed_optimizer.hpp | \
      hvactor/sync_batch_norm.hpp) continue ;;
  esac
  if ! grep -qx "$rel" "$reachable"; then
    echo "installed header $rel is not part of the public API (not reachable from hvactor.hpp or tune.hpp)" >&2
    exit 1
  fi
done < <(find "$include_dir" -name '*.hpp')
echo "$(wc -l < "$reachable") public headers installed"

echo "== configuring consumer against $prefix"
# hvactor_DIR pins the package to the temp prefix: a copy installed elsewhere
# on the system must not satisfy find_package.
cmake -S "$consumer_src" -B "$consumer_build" \
  -DCMAKE_BUILD_TYPE="$config" \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -Dhvactor_DIR="$config_dir"

echo "== building consumer"
cmake --build "$consumer_build" --config "$config" -j "$(nproc 2>/dev/null || echo 2)"

exe="$consumer_build/hvactor_consumer"
[[ -x "$exe" ]] || exe="$consumer_build/$config/hvactor_consumer"

echo "== running consumer"
# The installed tools (hvactor-node, ...) come first on PATH.
out=$(PATH="$prefix/bin:$PATH" timeout -k 10 300 "$exe" 2>&1) || { rc=$?; echo "$out"; echo "consumer exited with $rc" >&2; exit 1; }
echo "$out"
grep -q "consumer ok" <<<"$out" || { echo "consumer did not print 'consumer ok'" >&2; exit 1; }

if [[ -f "$config_dir/hvactorTorchTargets.cmake" ]]; then
  echo "== the LibTorch adapter: configuring torch_consumer (find_package(hvactor COMPONENTS torch))"
  for h in torch.hpp torch_state.hpp distributed_optimizer.hpp sync_batch_norm.hpp; do
    [[ -f "$include_dir/hvactor/$h" ]] || { echo "missing installed header hvactor/$h" >&2; exit 1; }
  done
  torch_src="$(dirname "$consumer_src")/torch_consumer"
  cmake -S "$torch_src" -B "$work/torch-consumer-build" \
    -DCMAKE_BUILD_TYPE="$config" \
    -DCMAKE_PREFIX_PATH="$prefix" \
    -Dhvactor_DIR="$config_dir"
  cmake --build "$work/torch-consumer-build" --config "$config" -j "$(nproc 2>/dev/null || echo 2)"
  texe="$work/torch-consumer-build/hvactor_torch_consumer"
  [[ -x "$texe" ]] || texe="$work/torch-consumer-build/$config/hvactor_torch_consumer"
  echo "== running torch_consumer on 2 ranks under the installed hvactor-run"
  out=$(cd "$work" && timeout -k 10 300 "$prefix/bin/hvactor-run" -np 2 -- "$texe" 2>&1) \
    || { rc=$?; echo "$out"; echo "hvactor-run -np 2 torch_consumer exited with $rc" >&2; exit 1; }
  echo "$out"
  grep -q "torch consumer ok" <<<"$out" || { echo "torch_consumer did not print 'torch consumer ok'" >&2; exit 1; }
fi

# The Python package (built when pybind11 and Debian's python3-torch are
# there): the installed hvactor.torch under the installed hvactor-run.
ext=$(find "$prefix" -name '_hvactor*.so' | head -n1)
if [[ -n "$ext" ]]; then
  pydir=$(dirname "$(dirname "$ext")")
  python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  echo "== the Python package: hvactor.torch from $pydir on 2 ranks ($python)"
  out=$(cd "$work" && PYTHONPATH="$pydir" timeout -k 10 300 "$prefix/bin/hvactor-run" -np 2 \
        "$python" -c "import hvactor.torch as hvd, torch; hvd.init(); \
import hvactor; assert hvactor.__file__.startswith('$pydir'), hvactor.__file__; \
print('python ok', hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist())" 2>&1) \
    || { rc=$?; echo "$out"; echo "the installed hvactor.torch exited with $rc" >&2; exit 1; }
  echo "$out"
  [[ $(grep -c "python ok \[2.0, 2.0\]" <<<"$out") == 2 ]] \
    || { echo "the installed hvactor.torch did not reduce on both ranks" >&2; exit 1; }
fi

echo "== install_find_package: OK"
