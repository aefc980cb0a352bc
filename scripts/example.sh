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

# A fresh build/ uses Ninja (it keeps both cores busy while a library links
# or LibTorch's header is precompiled); an existing one keeps its generator.
generator=()
if [[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHVACTOR_BUILD_TESTS=OFF -DHVACTOR_BUILD_BENCHMARKS=OFF -DHVACTOR_BUILD_TOOLS=OFF
example=quickstart
if [[ ! -d build/examples/CMakeFiles/quickstart.dir ]]; then
  echo "example.sh: LibTorch not found, running simple_fn instead of quickstart" >&2
  example=simple_fn
fi
cmake --build build -j "$(nproc)" --target "$example"
exec "build/examples/$example" "$@"
