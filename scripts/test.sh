#!/usr/bin/env bash
# test.sh: build (scripts/build.sh), then run every ctest suite.
# Exits with ctest's status. Extra arguments go to ctest, e.g.
#   scripts/test.sh -L unit
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/build.sh

set +e
ctest --test-dir build --output-on-failure --timeout 600 "$@"
status=$?
set -e
exit "$status"
