#!/usr/bin/env bash
# build.sh: install dependencies, configure (RelWithDebInfo) into build/ and
# build with all cores. Extra arguments go to the cmake configure step, e.g.
#   scripts/build.sh -DHVACTOR_BUILD_BENCHMARKS=OFF
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j "$(nproc)"
