#!/usr/bin/env bash
# schema_test.sh BUILD_DIR: deploy/kubernetes against the Kubernetes schemas,
# offline once the npm packages kubernetes-models and js-yaml are cached in
# BUILD_DIR/k8s-schema (installed from the npm registry the first time; no
# node, npm or registry: skip, exit 77). A corrupted copy must fail, so the
# check is known to bite. yamllint too when it is installed.
set -uo pipefail
B=$(realpath "${1:?build dir}"); HERE=$(cd "$(dirname "$0")" && pwd)
M=$(cd "$HERE/../../deploy/kubernetes" && pwd)
C="$B/k8s-schema"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed for the schema check"; exit 77
fi
if [ ! -d "$C/node_modules/kubernetes-models" ] || [ ! -d "$C/node_modules/js-yaml" ]; then
  mkdir -p "$C"
  if ! timeout 180 npm install --prefix "$C" --no-audit --no-fund --loglevel=error \
       kubernetes-models@4 js-yaml@4 > "$C/npm.log" 2>&1; then
    echo "SKIP: cannot install kubernetes-models/js-yaml from npm: $(tail -2 "$C/npm.log")"; exit 77
  fi
fi
export NODE_PATH="$C/node_modules"
failures=0
node "$HERE/check_manifests.js" "$M"/*.yaml || failures=$((failures + 1))
# The check must catch a broken manifest.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
sed -e 's/replicas: 1/replicas: one/' -e 's/containerPort: 6380/containerPort: registry/' \
  "$M/head-statefulset.yaml" > "$T/broken.yaml"
if node "$HERE/check_manifests.js" "$T/broken.yaml" > "$T/out" 2>&1; then
  echo "FAIL: a StatefulSet with replicas: one passed the schema check"; failures=$((failures + 1))
elif grep -q "replicas" "$T/out"; then echo "ok: the corrupted copy fails: $(head -c 200 "$T/out")"
else echo "FAIL: the corrupted copy failed without naming replicas: $(cat "$T/out")"; failures=$((failures + 1)); fi
if command -v yamllint >/dev/null; then
  yamllint -d '{extends: relaxed, rules: {line-length: {max: 100}}}' "$M" && echo "ok: yamllint" \
    || failures=$((failures + 1))
fi
echo "schema_test: $failures failure(s)"
[ "$failures" = 0 ]
