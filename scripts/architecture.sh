#!/usr/bin/env bash
# architecture.sh: renders docs/architecture.dot (the floors and one job's
# messages) into docs/architecture.svg with Graphviz. Run it after editing
# the .dot; the `architecture` test checks that the SVG is its rendering.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v dot >/dev/null || { echo "architecture.sh: needs Graphviz's dot (scripts/setup.sh installs it)" >&2; exit 1; }
dot -Tsvg "$root/docs/architecture.dot" -o "$root/docs/architecture.svg"
echo "wrote docs/architecture.svg"
