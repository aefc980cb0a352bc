#!/usr/bin/env bash
# example.sh: the first run. Installs what the libraries and examples need
# (scripts/setup.sh --build-only), configures build/ with only the libraries
# and examples (no tests, benchmarks or tools), builds only the example and
# what it links, then runs the quickstart (three workers train a small MLP
# on the embedded local cluster; needs LibTorch), or examples/simple_fn
# where LibTorch was not found. scripts/test.sh later installs the rest and
# builds everything into the same build/, reusing what was built here.
# Extra arguments are passed to the example.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh --build-only

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVACTOR_BUILD_TESTS=OFF \
  -DHVACTOR_BUILD_BENCHMARKS=OFF -DHVACTOR_BUILD_TOOLS=OFF
example=quickstart
targets=$(cmake --build build --target help)
if ! grep -qx '\.\.\. quickstart' <<<"$targets"; then
  echo "example.sh: LibTorch not found, running simple_fn instead of quickstart" >&2
  example=simple_fn
fi
cmake --build build -j "$(nproc)" --target "$example"
exec "build/examples/$example" "$@"
