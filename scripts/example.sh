#!/usr/bin/env bash
# example.sh: install the packages (scripts/setup.sh), configure build/ as
# scripts/build.sh does, build only what the example needs (the libraries
# and the example: no tests, benchmarks or tools), then run the quickstart
# example (three workers train a small MLP on the embedded local cluster;
# needs LibTorch), or examples/simple_fn where LibTorch was not found.
# A later scripts/test.sh builds the rest into the same build/.
# Extra arguments are passed to the example.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
example=quickstart
if ! cmake --build build --target help | grep -qx '\.\.\. quickstart'; then
  echo "example.sh: LibTorch not found, running simple_fn instead of quickstart" >&2
  example=simple_fn
fi
cmake --build build -j "$(nproc)" --target "$example"
exec "build/examples/$example" "$@"
