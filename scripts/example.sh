#!/usr/bin/env bash
# example.sh: build (scripts/build.sh), then run the simple_fn example.
# Extra arguments are passed to the example.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/build.sh

exec build/examples/simple_fn "$@"
