#!/usr/bin/env bash
# build.sh: install dependencies, configure (RelWithDebInfo) into build/ and
# build with all cores. Extra arguments go to the cmake configure step, e.g.
#   scripts/build.sh -DHVACTOR_BUILD_BENCHMARKS=OFF
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh

# Everything on (scripts/example.sh may have configured build/ with only the
# libraries and examples); later arguments override.
all_on=(-DHVACTOR_BUILD_TESTS=ON -DHVACTOR_BUILD_BENCHMARKS=ON -DHVACTOR_BUILD_TOOLS=ON
  -DHVACTOR_BUILD_EXAMPLES=ON)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${all_on[@]}" "$@"
cmake --build build -j "$(nproc)"
