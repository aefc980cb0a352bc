#!/usr/bin/env bash
# example.sh: build (scripts/build.sh), then run the quickstart example
# (three workers train a small MLP on the embedded local cluster; needs
# LibTorch), or examples/simple_fn where LibTorch was not found.
# Extra arguments are passed to the example.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/build.sh

if [[ -x build/examples/quickstart ]]; then
  exec build/examples/quickstart "$@"
fi
echo "example.sh: LibTorch not found, running simple_fn instead of quickstart" >&2
exec build/examples/simple_fn "$@"
